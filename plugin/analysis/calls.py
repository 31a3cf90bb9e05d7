"""What the calls a function makes tell its analysis: whether the callee returns, and how.

A callee never returns by its symbol's name (or its PLT stub's, or its GOT
slot's), or by its own analysis: decide_noreturn() decides it for every
function of the module at once (plugin.analysis.noreturn). A callee that
returns may be an i386 pc thunk (it only loads its return address into a
register), pop argument bytes (`ret 4`), or be a Windows x64 stack probe
with its own contract (plugin.analysis.probes). CallFacts holds these
decisions for plugin.analysis.CodeAnalysis, the class it is mixed into
(whose decoder, functions and analyses they read).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from plugin.analysis import arm_plt, noreturn, probes
from plugin.analysis.flow import NO_CALLEE, Callee
from plugin.analysis.addresses import ByteMap
from plugin.analysis.ops import Flow, Insn, Step

# Functions that never return, by symbol name (C library, C++ runtime, CPython).
NORETURN_NAMES = frozenset((
    "abort", "exit", "_exit", "_Exit", "quick_exit", "__stack_chk_fail", "__stack_chk_fail_local",
    "__assert_fail", "__assert_perror_fail", "__libc_fatal", "__fortify_fail", "__chk_fail",
    "longjmp", "_longjmp", "siglongjmp", "__longjmp_chk", "__libc_longjmp", "__libc_siglongjmp",
    "pthread_exit", "thrd_exit", "__cxa_throw", "__cxa_rethrow", "__cxa_bad_cast",
    "__cxa_bad_typeid", "__cxa_pure_virtual", "__cxa_deleted_virtual",
    "__cxa_throw_bad_array_new_length", "__cxa_call_unexpected", "__cxa_call_terminate",
    "_Unwind_Resume", "err", "errx", "verr", "verrx", "_ZSt9terminatev", "_ZSt10unexpectedv",
    "Py_FatalError", "_Py_FatalErrorFunc", "_Py_FatalErrorFormat", "_PyObject_AssertFailed",
    "_dl_signal_error", "_dl_signal_exception", "_dl_fatal_printf", "__malloc_assert",
    "__libc_start_main",
))
MAX_NESTING = 64                 # callees analysed to decide "does not return", one inside another
MAX_RETURN_SWEEP = 256           # instructions of a callee read in order for its first return
UNDECIDED_POPS = Callee(popped=None, why="its returns pop different argument bytes, or its code cannot be read")


def _agreed(pops) -> Callee:
    """The callee that pops the one amount all its returns pop (none found: nothing), else undecided
    (amounts that disagree, or None: one not decided)."""
    if len(pops) > 1 or None in pops:
        return UNDECIDED_POPS
    popped = next(iter(pops)) if pops else 0
    return Callee(popped=popped) if popped else NO_CALLEE


def is_noreturn_name(name: str) -> bool:
    name = name.split("@")[0]
    return name in NORETURN_NAMES or (name.startswith("_ZSt") and "__throw_" in name)


class CallFacts:
    """The call decisions of CodeAnalysis (mixed into it)."""

    # -- calls that do not return --

    def _is_noreturn(self, insn) -> bool:
        """Does the call `insn` never return? By its target's name or analysis, or its GOT slot's symbol."""
        if insn.target is None:
            if insn.through_memory and insn.indirect[1][0] == "addr":
                name = self.got_names.get(insn.indirect[1][1])
                return name is not None and is_noreturn_name(name)
            return False
        target = insn.target
        found = self._noreturn.get(target)
        if found is not None:
            return found
        answer = self._decide_noreturn(target)
        self._noreturn[target] = answer
        return answer

    def decide_noreturn(self) -> None:
        """Decide for every function of the module at once whether it returns (plugin.analysis.noreturn),
        so that no answer depends on which function was analysed first; call after entry_states is set.
        Where the architecture has a control-flow-only decoder, the instructions are decoded for this
        pass alone (cheaper; `--jobs N` runs it before forking, the full decoding is spread after)."""
        light = None if self.thumb else getattr(self.facts, "decode_flow", None)
        if light is None:
            for start, end in sorted(self.functions.items()):
                self.decode_range(start, end)
            decode_at, falls_through = self.decode_at, None
        else:
            flow_only, sizes = self._flow_sweep(light)
            falls_through = sizes.get

            def decode_at(address):
                insn = flow_only.get(address)
                if insn is not None:
                    return insn
                size = sizes.get(address)
                return Insn(address, size, "") if size else self.decode_at(address)
        module = noreturn.Module(self.functions, self.entry_states, decode_at, self._named_noreturn,
                                 self._slot_noreturn, falls_through)
        self._noreturn.update(noreturn.decide(module))
        self._noreturn_decided = True

    def _flow_sweep(self, light) -> Tuple[Dict[int, Step], ByteMap]:
        """Every function swept once: its jumps, calls and returns, and the size of every instruction that
        only falls through (0 for the others; memory: not an Insn each); the sweep is kept for
        decode_range (self.sweeps). light: the facts' decode_flow, a Step, or None for an instruction
        that falls through by its mnemonic alone (asked once per mnemonic). Where functions overlap an
        address is swept twice, to the same instruction (the code from an address decides it)."""
        flow_only: Dict[int, Step] = {}
        sizes = ByteMap()
        falling: set = set()            # mnemonics of instructions that only fall through
        for start, end in sorted(self.functions.items()):
            try:
                code = self.read(start, end - start)
            except Exception:
                continue
            swept, texts, flows = bytearray(), [], []
            size_of, text_of = swept.append, texts.append
            for address, size, mnemonic, op_str in self._cs.disasm_lite(code, start):
                size_of(size)
                text_of(mnemonic)
                text_of(op_str)
                if mnemonic not in falling:
                    step = light(address, size, mnemonic, op_str)
                    if step is None:
                        falling.add(mnemonic)
                    else:
                        flow_only[address] = step
                        flows.append(address)
            sizes.set_run(start, swept)
            sizes.set_all(flows, 0)
            self.sweeps.keep(start, end, swept, texts)
        return flow_only, sizes

    def _named_noreturn(self, target) -> Optional[bool]:
        """Does the function at target never return, by its name (or its PLT stub's)? None: its own
        code decides (no name, or a name of this module's not among NORETURN_NAMES: asan's `Die`
        and `CheckFailed`, whose callers' literal pools follow the call)."""
        name = self.symbol(target) if self.symbol else None
        if name is not None:
            return True if is_noreturn_name(name) else None
        name = self._stub_name(target)
        return None if name is None else is_noreturn_name(name)

    def _slot_noreturn(self, slot) -> Optional[bool]:
        name = self.got_names.get(slot)
        return None if name is None else is_noreturn_name(name)

    def _decide_noreturn(self, target):
        named = self._named_noreturn(target)
        if named is not None:
            return named
        if self._noreturn_decided:
            return False            # not a function decide_noreturn() saw: assumed to return
        if target in self.functions and target not in self._busy and len(self._busy) < MAX_NESTING:
            result = self.function(target)
            return not result.returns and not result.unresolved and bool(result.states)
        return False

    def _stub_name(self, target):
        """The symbol a PLT stub jumps to, through its GOT slot (Arm's: from its words, arm_plt)."""
        if self.arch.name == "arm":
            return self.got_names.get(arm_plt.got_slot(self.read, target))
        return self.got_names.get(self._stub_slot(target))

    def _stub_slot(self, target) -> Optional[int]:
        """The GOT slot an x86 or aarch64 PLT stub at target jumps through: an absolute or pc-relative
        one, or i386 PIC's `jmp [ebx + offset]` (ebx holds the GOT's address there, by the ABI)."""
        address = target
        for _ in range(2):
            insn = self.decode_at(address)
            if insn is None:
                return None
            if insn.flow == Flow.INDIRECT and insn.through_memory:
                slot = insn.indirect[1]
                if slot[0] == "addr":
                    return slot[1]
                base = getattr(self.facts, "PLT_GOT_REGISTER", None)
                if self.got_base is not None and slot[0] == "add" and slot[1] == ("reg", base):
                    return self.got_base + slot[2]
                return None
            if insn.flow != Flow.NEXT or insn.effects:
                return None
            address = insn.end
        return None

    # -- what a returning call leaves behind --

    def _callee(self, insn) -> Callee:
        """A direct call's callee: a pc thunk (i386 PIC), or a function whose return pops arguments."""
        target = insn.target
        if target is not None and getattr(self.facts, "STACK_PROBES", ()):
            probe = self._stack_probe(insn)
            if probe is not None:
                return probe
        if target is None or not (self.facts.PC_THUNKS or self.facts.CALLEE_POPS):
            return NO_CALLEE
        return self._callee_of(target)

    def code_not_here(self, insn) -> bool:
        """Is a call's callee code this module does not hold: an indirect call, or a PLT stub of
        another module's function? (Taken to pop nothing until the caller's own code shows otherwise.)"""
        target = insn.target
        if target is None:
            return True
        return any(lo <= target < hi for lo, hi in self.stubs) and self.got_functions.get(self._stub_slot(target)) is None

    def _decide_callee(self, target) -> Callee:
        first = self.decode_at(target)
        if first is None:
            return NO_CALLEE
        if self.facts.PC_THUNKS:
            thunk = self.facts.pc_thunk(first, self.decode_at(first.end))
            if thunk is not None:
                return Callee(thunk=thunk)
        if not self.facts.CALLEE_POPS:
            return NO_CALLEE
        if any(lo <= target < hi for lo, hi in self.stubs):
            # A PLT stub: its callee's own returns when the module defines it, else another module's
            # function, taken (as any callee whose code is not known) to pop nothing.
            defined = self.got_functions.get(self._stub_slot(target))
            return NO_CALLEE if defined is None else self._popping(defined, readable=True)
        return self._popping(target)

    def _popping(self, target, readable=False) -> Callee:
        """How the function at target returns: the argument bytes every return reached in it (and in
        the functions it tail-calls) pops, when they agree; None when they disagree, or (readable:
        a function known to be there) its code cannot be read. Cached per function, except while
        its returns are being read (a recursive call, a cycle of calls): then from its extent."""
        found = self._callees.get(target)
        if found is not None:
            return found
        if self._provisional(target):
            return _agreed(self._extent_pops(target))
        self._deciding.add(target)
        try:
            found = self._read_pops(target, readable)
        finally:
            self._deciding.discard(target)
        self._callees[target] = found
        return found

    def _read_pops(self, target, readable) -> Callee:
        first = self.decode_at(target)
        if first is None:
            return UNDECIDED_POPS if readable else NO_CALLEE
        if target in self.functions:
            result = self.function(target)
            pops = set(result.pops)
            for tail in sorted(result.tail_calls):
                pops |= self._tail_pops(tail)
            return _agreed(pops)
        # No known extent: the first return in the callee's code, read in order, says how it returns
        # (padding after a jump ends the function: what follows is another one).
        insn, jumped = first, False
        for _ in range(MAX_RETURN_SWEEP):
            if insn is None or insn.flow == Flow.STOP or (jumped and self.facts.is_padding(insn.text)):
                return NO_CALLEE
            if insn.flow == Flow.RET:
                return Callee(popped=insn.popped) if insn.popped else NO_CALLEE
            jumped = insn.flow in (Flow.JUMP, Flow.INDIRECT)
            insn = self.decode_at(insn.end)
        return NO_CALLEE

    def _tail_pops(self, tail) -> set:
        """What a tail call's callee adds to the caller's returns: the amounts its own returns pop
        (none from a function that never returns, or one whose returns are being read already
        and has none in its extent); None among them: not decided."""
        if self._noreturn.get(tail):
            return set()
        if self._provisional(tail):
            return self._extent_pops(tail)
        return {self._callee_of(tail).popped}

    def _extent_pops(self, start) -> set:
        """The argument bytes each return in the function's extent pops, read in order ({None}: code
        that cannot be read); for a function whose returns are being read already, or whose
        analysis would nest too deep."""
        found = self._extents.get(start)
        if found is not None:
            return set(found)
        pops, address, end = set(), start, self.functions[start]
        while address < end:
            insn = self.decode_at(address)
            if insn is None:
                pops = {None}
                break
            if insn.flow == Flow.RET:
                pops.add(insn.popped)
            address = insn.end
        self._extents[start] = frozenset(pops)      # the code alone decides it: kept
        return pops

    def _callee_of(self, target) -> Callee:
        """A call's (or tail call's) callee, cached unless decided while its own analysis runs."""
        found = self._callees.get(target)
        if found is None:
            found = self._decide_callee(target)
            if not self._provisional(target):
                self._callees[target] = found
        return found

    def _provisional(self, target) -> bool:
        """Is the function at target being analysed, or its returns read, or would its analysis
        nest too deep? Then how it returns is read from its extent (_extent_pops), not cached."""
        return target in self.functions and (target in self._busy or target in self._deciding
                                             or len(self._busy) >= MAX_NESTING)

    def _stack_probe(self, insn) -> Optional[Callee]:
        """A Windows x64 stack probe (plugin.analysis.probes): named so by the module's symbols, or
        proven by its code where the call is followed by `sub rsp, rax`. None: an ordinary call."""
        target = insn.target
        if target in self._probes:
            return self._probes[target]
        if target not in self._unnamed:
            found = probes.by_name(self.facts, target, self.symbol(target) if self.symbol else None)
            if found is not None:
                self._probes[target] = found
                return found
            self._unnamed.add(target)
        after = self.decode_at(insn.end)
        if after is None or after.text not in probes.USES:
            return None             # not decided here: a later call of the same target may be a probe's
        found = self._probes[target] = probes.by_code(self.facts, target, self.decode_at, self.read)
        return found
