"""What a function's instructions do to the stack, over capstone.

From a function's first instruction every path is followed (plugin.analysis.flow),
tracking the stack pointer's offset from the CFA, which registers hold
stack addresses (a frame pointer, a DRAP register), where the caller's
callee-saved registers and the return address are stored, and what is in
each register. The result per instruction is a State, or no state with a
reason. Per-architecture instruction patterns live in x86.py (x86_64.py
and i386.py give its registers) and aarch64.py; plugin.analysis.rows turns
a State into an unwind row.

CodeAnalysis serves one module: it decodes lazily from the target's memory,
decides which called functions never return (by name, through PLT stubs,
and by analysing the callee), which are i386 pc thunks and how many
argument bytes a callee's return pops (those decisions: plugin.analysis.calls), and
analyses a function's `.cold` part with the frame of the jump that reaches it.
"""
from __future__ import annotations

import bisect
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from plugin.analysis import aarch64, arm, i386, landing, x86_64
from plugin.analysis.addresses import ByteMap
from plugin.analysis.calls import MAX_NESTING, NORETURN_NAMES, CallFacts, is_noreturn_name  # noqa: F401
from plugin.analysis.flow import Analyser, Callee, FunctionAnalysis, entry_like, entry_state
from plugin.analysis.ops import Flow
from plugin.analysis.state import CFA, Kind
from plugin.analysis.sweeps import Sweeps

FACTS = {"x86_64": x86_64, "aarch64": aarch64, "i386": i386, "arm": arm}
def _indirect(insn) -> bool:
    return insn.target is None


POPS_NOT_KNOWN = Callee(popped=None, why="a callee whose code is not here (an indirect call, or another module's"
                        " function), and this function's return or a join shows the stack pointer off by what such a"
                        " callee popped: what it pops is not known")


def supported(arch) -> bool:
    return arch.name in FACTS


def instruction_sets(arch, functions: Dict[int, int], symbol, read=None) -> Dict[bool, Dict[int, int]]:
    """{thumb: {start: end}}: on Arm a function is Thumb code when its symbol's value (symbol(address)
    -> (name, value)) is its start + 1; one with no symbol of its own (a static function of a stripped
    library: .ARM.exidx addresses carry no Thumb bit) is coded as the nearest one below that has one
    (the same object file, the same flags), else above; when none has, its code decides
    (arm.looks_like_arm, with read(address, size)); elsewhere all is one set."""
    if arch.name != "arm":
        return {False: functions}
    starts = sorted(functions)
    known = {}
    for start in starts:
        found = symbol(start | 1) if symbol else None
        if found and found[1] in (start, start | 1):
            known[start] = found[1] == start | 1
    out: Dict[bool, Dict[int, int]] = {False: {}, True: {}}
    thumb = next((known[s] for s in starts if s in known), None)
    for start in starts:
        thumb = known.get(start, thumb)
        coded = thumb if thumb is not None else read is None or not arm.looks_like_arm(read, start)
        out[coded][start] = functions[start]
    return out


def continuation_seeds(entries, jumps, start):
    """A part's seeds: the jumps that reach it, and its table's entry state at its first byte
    unless a jump reaches that byte (the jump's frame says more than the table being checked)."""
    if any(address == start for address, _ in jumps):
        entries = [seed for seed in entries if seed[0] != start]
    return entries + list(jumps)


class FrameKey:
    """A state's registers and slots, hashable, equal exactly when the states are: the state's own
    dicts (a state is not changed once made), compared as dicts, and a hash of their items that does
    not depend on their order, computed once, since every round of the parts (plugin.validate.parts)
    looks every key up again. It holds nothing the state does not (a module keeps one for every jump
    into a `.cold` part until the parts are settled), and needs no sort. Pickled for `--jobs N`,
    whose processes are forked (the same string hashes)."""
    __slots__ = ("regs", "mem", "hash")

    def __init__(self, state):
        self.regs, self.mem = state.regs, state.mem
        self.hash = hash((sum(map(hash, state.regs.items())), sum(map(hash, state.mem.items()))))

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return isinstance(other, FrameKey) and self.hash == other.hash and self.regs == other.regs \
            and self.mem == other.mem


def frame_key(state) -> FrameKey:
    return FrameKey(state)


class CodeAnalysis(CallFacts):
    """The instruction analysis of one module's functions.

    read(address, size) -> bytes reads code; functions is the sorted list of
    (start, end) ranges with table entries (or symbols); symbol(address) ->
    name or None; stubs: (start, end) ranges of PLT sections, whose every
    stub is an entry; thumb: the code is Thumb (Arm only: one CodeAnalysis per
    instruction set); got_names: GOT slot -> symbol name, got_functions: GOT slot ->
    the module's own function of that name, got_base: the GOT's address (i386 PIC
    stubs jump through ebx + offset) -- plugin.validate.sources reads all three.
    """

    def __init__(self, arch, read: Callable[[int, int], bytes],
                 functions: Sequence[Tuple[int, int]] = (), symbol=None, got_names=None,
                 stubs: Sequence[Tuple[int, int]] = (), lsda=None, entry_states=None, thumb=False,
                 got_functions=None, got_base: Optional[int] = None):
        import capstone
        self.arch = arch
        self.facts = FACTS[arch.name]
        self.read = read
        cs_arch, cs_mode = self.facts.CAPSTONE_THUMB if thumb else self.facts.CAPSTONE
        self.thumb = thumb
        self._decode = self.facts.decode_thumb if thumb else self.facts.decode
        self._cs = capstone.Cs(getattr(capstone, cs_arch), getattr(capstone, cs_mode))
        self._decoded: Dict[int, object] = {}
        self._dropped = ByteMap()           # 1 where an Insn decoded once was dropped (drop_decoded)
        self.sweeps = Sweeps()              # each function's first sweep (decide_noreturn), read again
        self.functions = {start: end for start, end in functions}
        self.symbol = symbol
        self.got_names = got_names or {}
        self.got_functions = got_functions or {}    # GOT slot -> the module's own function its symbol names
        self.got_base = got_base                    # i386 PIC: the GOT address a PLT stub's ebx holds
        self.stubs = list(stubs)
        self.lsda = lsda or {}          # function start -> LSDA address
        # (function start, call address) -> the argument bytes still pushed at that call, which the
        # unwinder pops when it resumes a landing pad (the table's DW_CFA_GNU_args_size; None: 0)
        self.args_size: Optional[Callable[[int, int], int]] = None
        # function start -> (address, State or None: cannot be set up) for functions
        # a table says are not entered by a call (PLT resolvers, .cold parts, pads)
        self.entry_states = entry_states or {}
        self._results: Dict[int, FunctionAnalysis] = {}
        self._seeds: Dict[int, list] = {}
        self._busy: List[int] = []
        self._noreturn: Dict[int, bool] = {}
        self._callees: Dict[int, Callee] = {}
        self._deciding: set = set()                         # callees whose returns are being read (cycles)
        self._extents: Dict[int, frozenset] = {}            # function -> what each return in its extent pops
        self._probes: Dict[int, Optional[Callee]] = {}      # call target -> its stack-probe contract, or None
        self._unnamed: set = set()                          # call targets no probe's name names
        self._part_starts: Optional[List[int]] = None
        self._seed_keys: Dict[int, set] = {}
        self._entered: Dict[int, Dict[int, int]] = {}
        self._swept: set = set()            # parts decoded whole (_part_instruction)
        self._noreturn_decided = False      # decide_noreturn() ran: no callee is analysed on demand

    # -- decoding --

    def decode_at(self, address):
        insn = self._decoded.get(address)
        if insn is None:
            try:
                code = self.read(address, 16)
            except Exception:       # unreadable: no instruction here
                return None
            for found in self._cs.disasm_lite(code, address, 1):
                insn = self._decoded[address] = self._decode(*found)
        return insn

    def decode_range(self, start, end):
        """Linear sweep of [start, end) into the cache; jumps elsewhere decode on demand."""
        found = self.sweeps.again(start, end, last=self.is_final(start))
        if found is None:
            try:
                code = self.read(start, end - start)
            except Exception:
                return
            found = self._cs.disasm_lite(code, start)
        decode = self._decode
        cache = self._decoded
        for address, size, mnemonic, op_str in found:
            if address not in cache:
                cache[address] = decode(address, size, mnemonic, op_str)

    def is_decoded(self, address: int) -> bool:
        """Was an instruction decoded at address (by a sweep, or on demand), kept or dropped since?"""
        return address in self._decoded or address in self._dropped

    def drop_decoded(self, start: int, end: int) -> None:
        """Drop the instructions a linear sweep of [start, end) decoded (memory: a checked function's
        code is decoded again only if asked for), remembering where they were (is_decoded). Thumb
        code is kept: capstone decodes an IT block's instructions right only in one sweep."""
        if self.thumb:
            return
        address, dropped, pop = start, [], self._decoded.pop
        while address < end:
            insn = pop(address, None)
            if insn is None:
                break
            dropped.append(address)
            address = insn.end
        self._dropped.set_all(dropped, 1)

    # -- functions --

    def function(self, start: int, end: Optional[int] = None) -> FunctionAnalysis:
        result = self._results.get(start)
        if result is not None:
            return result
        end = end if end is not None else self.functions.get(start, start + 1)
        self.decode_range(start, end)
        seeds = self._entries(start, end)
        if start in self._seeds:        # a .cold part: the frames of the jumps that reach it
            seeds = continuation_seeds(seeds, self._seeds[start], start)
        pads = landing.call_sites(self.read, self.lsda[start], start, self.facts.POINTER_SIZE) \
            if self.lsda.get(start) else ()
        args_size = self.args_size
        analyser = Analyser(self.facts, self.decode_at, self.read, self._is_noreturn,
                            is_boundary=self.is_decoded, callee=self._callee,
                            in_part=self._part_instruction,
                            args_size=(lambda pc: args_size(start, pc)) if pads and args_size else lambda pc: 0,
                            decoded=self._decoded)
        self._busy.append(start)
        try:
            result = analyser.run(start, end, seeds, pads)
            if self.facts.CALLEE_POPS:
                # Indirect calls first: GCC's struct returns through a pointer; then other modules' functions
                # too (each step runs only where the function still shows a callee popped).
                for not_here in (_indirect, self.code_not_here):
                    if self._shows_popping(result, not_here):
                        analyser.callee = lambda insn, not_here=not_here: \
                            POPS_NOT_KNOWN if not_here(insn) else self._callee(insn)
                        result = analyser.run(start, end, seeds, pads)
        finally:
            self._busy.pop()
        result.entered = self._entered.get(start, {})
        self._results[start] = result
        return result

    def _return_misplaced(self, result: FunctionAnalysis) -> bool:
        """Is a return reached with the stack pointer known and not at the return address? (i386: a
        callee whose code is not known, taken to pop nothing, popped a struct's hidden pointer.)"""
        for address, state in result.states.items():
            insn = result.insns.get(address)
            if insn is not None and insn.flow == Flow.RET:
                sp = state.reg(self.facts.SP)
                if sp[0] == Kind.STACK and sp[1] == CFA and sp[2] != -self.facts.POINTER_SIZE:
                    return True
        return False

    def _shows_popping(self, result: FunctionAnalysis, not_here) -> bool:
        """Does the function call code not here (not_here(insn)), and show that such a callee, taken to
        pop nothing, popped: a return off its return address, or paths joining at two known heights?"""
        return (result.stack_heights_differ or self._return_misplaced(result)) and any(
            insn.flow == Flow.CALL and not_here(insn) for insn in result.insns.values())

    def function_covering(self, start: int, pc: int, end: int) -> FunctionAnalysis:
        """function(start, end), analysed again with `end` when a cached analysis stops at or before pc."""
        cached = self._results.get(start)
        if cached is not None and cached.end <= pc:
            del self._results[start]
        return self.function(start, end)

    def _entries(self, start, end):
        """Seeds: the entry state at start; in a PLT section at every stub too."""
        first = None
        if start in self.entry_states:
            address, state = self.entry_states[start]
            first = [] if state is None else [(address, state)]
        state = entry_state(self.facts)
        if not any(lo <= start < hi for lo, hi in self.stubs):
            return first if first is not None else [(start, state)]
        seeds, jumped_to, address = [], set(), start
        previous_ends_path = True
        while address < end:
            insn = self.decode_at(address)
            if insn is None:
                break
            padding = insn.text.startswith(self.facts.PLT_PADDING)
            if previous_ends_path and not padding:
                seeds.append(address)
            if not padding:
                previous_ends_path = insn.flow in (Flow.JUMP, Flow.INDIRECT)
            if insn.flow == Flow.JUMP:
                jumped_to.add(insn.target)
            address = insn.end
        stubs = [(a, state) for a in seeds if a not in jumped_to and (first is None or a != start)]
        return (first or []) + stubs

    def analyse_all(self) -> Dict[int, FunctionAnalysis]:
        """Every function; then the parts reached by a jump with the frame set up, again with that frame."""
        for start, end in sorted(self.functions.items()):
            self.function(start, end)
        return self.analyse_continuations()

    def is_final(self, start: int) -> bool:
        """Is the function at start's analysis final before analyse_continuations()? Only a
        function whose table says it is not entered by a call (a .cold part) may be redone there."""
        return start not in self.entry_states

    def forget_states(self, start: int) -> None:
        """Drop a checked function's per-instruction states (most of the memory), keeping what
        the analysis of other functions asks of it: exits, returns, unresolved jumps, reached or not."""
        result = self._results.get(start)
        if result is not None and len(result.states) > 1:
            first = next(iter(result.states))
            result.states = {first: result.states[first]}
            result.insns = {}
        if result is not None:
            self.drop_decoded(start, result.end)
        if result is not None and self.entry_states:
            self.continuation_exits(result)     # all analyse_continuations() reads of the exits
            result.exits, result.exit_slots = [], {}

    def part_of(self, target: int) -> Optional[int]:
        """The start of the part (a function whose table says it is not entered by a call: a .cold
        part) holding target, at its first byte or in its middle; None when target is in no part."""
        if self._part_starts is None:
            self._part_starts = sorted(s for s in self.entry_states if s in self.functions)
        starts = self._part_starts
        i = bisect.bisect_right(starts, target) - 1
        if i >= 0 and target < self.functions[starts[i]]:
            return starts[i]
        return target if target in self.entry_states else None

    def _part_instruction(self, address: int) -> bool:
        """Is address an instruction of a part (.cold), as a linear sweep of the whole part decodes it?"""
        part = self.part_of(address)
        if part is None:
            return False
        if part not in self._swept:
            self._swept.add(part)
            self.decode_range(part, self.functions.get(part, part + 1))
        return self.is_decoded(address)

    def continuation_exits(self, result: FunctionAnalysis) -> List[Tuple[int, int, object, object, int]]:
        """[(part, target, state, key, jump)]: the jumps of result into a part with the frame still set up,
        each once (key: the jump's target and frame, hashable; jump: the first jump there, the evidence);
        computed once per analysis."""
        if result.continuations is None:
            out, keys = [], set()
            for target, state in result.exits:
                part = self.part_of(target)
                if part is not None and part != result.start and not entry_like(state, self.facts):
                    key = (target, frame_key(state))
                    if key not in keys:
                        keys.add(key)
                        out.append((part, target, state, key, result.exit_jumps.get(target)))
            result.continuations = out
        return result.continuations

    def analyse_continuations(self) -> Dict[int, FunctionAnalysis]:
        """The parts reached by a jump with the frame set up (every function analysed), again with that
        frame: each part from every jump target into it (its first byte or its middle)."""
        for _ in range(3):
            seeds: Dict[int, dict] = {}
            for start in sorted(self._results):
                # Only a function whose table says it is not entered by a call
                # (a .cold part) takes the frame of a jump that reaches it.
                for part, target, state, key, _ in self.continuation_exits(self._results[start]):
                    seeds.setdefault(part, {}).setdefault(key, (target, state))
            fresh = {t: s for t, s in seeds.items() if self._seed_keys.get(t) != s.keys()}
            if not fresh:
                break
            for target, found in fresh.items():
                self._seeds[target] = list(found.values())
                self._seed_keys[target] = set(found)
                self._results.pop(target, None)
            for target in fresh:
                self.function(target)
        return self._results

    def set_seeds(self, start: int, seeds: list) -> None:
        """The (target, state, jump) of every jump that enters the part at start: its analysis is redone
        with them; the result's `entered` names the jump at each target."""
        self._results.pop(start, None)
        self._entered[start] = {}
        for target, _, jump in seeds:
            self._entered[start].setdefault(target, jump)
        if seeds:
            self._seeds[start] = [(target, state) for target, state, _ in seeds]
        else:
            self._seeds.pop(start, None)

    def is_continuation(self, start: int) -> bool:
        """True when the function at start is entered by jumps from another's frame (a .cold part)."""
        return start in self._seeds
