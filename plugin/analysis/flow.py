"""Follow every path of one function: a worklist over instructions, joining where paths meet.

The state before each reached instruction is what the analysis knows there
(plugin.analysis.state). Paths end at returns, tail calls (a jump out of
the function with the stack as it was at entry), calls of functions that do
not return, hlt/ud2/brk, and jumps the analysis cannot follow. Jumps out of
the function with the frame still set up are recorded as exits: they reach
a part of the same function placed elsewhere (GCC's `.cold` parts), which
the module driver then analyses with this state instead of an entry state.
Jump tables (plugin.analysis.table_reading) whose index no compare bounds are
followed last: code only they reach is `assumed` (its wrong rows undecided).
What one instruction does to a state is plugin.analysis.transfer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from plugin.analysis.bounds import BOUND, BOUND_OF, BOUND_PENDING, branch_bound  # noqa: F401
from plugin.analysis.ops import Flow, Insn
from plugin.analysis.state import OTHER, Kind, State, addr, join, plus, unknown
from plugin.analysis.table_reading import TableReading
from plugin.analysis.transfer import apply, entry_like, entry_state  # noqa: F401

NEXT, BRANCH, JUMP, CALL, RET = Flow.NEXT, Flow.BRANCH, Flow.JUMP, Flow.CALL, Flow.RET  # per instruction: globals
MAX_VISITS = 24                   # joins per instruction before the analysis gives up on it
CLOBBERED = unknown("clobbered by a call")


@dataclass
class FunctionAnalysis:
    start: int
    end: int
    insns: Dict[int, Insn]
    states: Dict[int, State]                         # the state before each reached instruction
    returns: bool = False                            # some path reaches a return or a tail call
    exits: List[Tuple[int, State]] = field(default_factory=list)    # (target, state) frame still set up
    unresolved: List[int] = field(default_factory=list)            # indirect jumps not followed
    gave_up: Dict[int, str] = field(default_factory=dict)          # address -> why no state there
    assumed: set = field(default_factory=set)        # reached only through an unresolved indirect jump
    pops: set = field(default_factory=set)           # argument bytes each reached return pops (`ret 4`; 0)
    tail_calls: set = field(default_factory=set)     # the targets of its direct tail calls
    notes: Dict[int, str] = field(default_factory=dict)            # call address -> the contract it follows
    # a jump table's jump -> (table address, entries read, bounded by a compare, every target followed)
    tables: Dict[int, Tuple[int, int, bool, tuple]] = field(default_factory=dict)
    continuations: Optional[list] = None             # CodeAnalysis.continuation_exits, once computed
    exit_jumps: Dict[int, int] = field(default_factory=dict)        # exit target -> the first jump there
    exit_slots: Dict[Tuple[int, int], int] = field(default_factory=dict)   # (jump, target) -> index in exits
    entered: Dict[int, int] = field(default_factory=dict)  # a part's seed -> the jump (another function's)
    stack_heights_differ: bool = False               # paths joined with the stack pointer at two known heights


@dataclass(frozen=True)
class Callee:
    """What the analysis knows of a called function besides whether it returns."""
    thunk: Optional[int] = None      # a pc thunk: the register it sets to the return address, nothing else
    popped: Optional[int] = 0        # argument bytes its return pops (i386 `ret 4`), the caller's sp goes up;
                                     # None: its returns disagree or cannot be read (sp not known after)
    clobbers: Optional[Tuple[int, ...]] = None   # the registers it may change, by a known contract (None: the ABI's)
    why: str = ""                    # the evidence for that contract


NO_CALLEE = Callee()
POPS_UNKNOWN = unknown("what the callee pops is not known (its returns disagree, or its code is not known)")


class Analyser(TableReading):
    """Runs the worklist for one function of one module."""

    def __init__(self, facts, decode_at: Callable[[int], Optional[Insn]],
                 read: Callable[[int, int], bytes], noreturn: Callable[[int], bool],
                 is_boundary: Callable[[int], bool] = lambda address: True,
                 callee: Callable[[Insn], Callee] = lambda insn: NO_CALLEE,
                 in_part: Callable[[int], bool] = lambda address: False,
                 args_size: Callable[[int], int] = lambda address: 0,
                 decoded: Optional[Dict[int, Insn]] = None):
        self.facts = facts
        self.decoded = {} if decoded is None else decoded     # instructions decode_at gives without decoding
        self.args_size = args_size      # a call's address -> the argument bytes the unwinder pops landing
        self.in_part = in_part          # is an address an instruction of a part placed elsewhere (.cold)?
        self.callee = callee
        self.is_boundary = is_boundary
        self.decode_at = decode_at
        self.read = read
        self.noreturn = noreturn
        self.table_entries: Dict[tuple, dict] = {}      # TableReading's

    def run(self, start: int, end: int, seeds: List[Tuple[int, State]], pads=()) -> FunctionAnalysis:
        """pads: [(call-site start, end, landing pad)] from the function's LSDA."""
        result = FunctionAnalysis(start, end, {}, {})
        self._followed: Dict[int, State] = {}     # address -> the state its successors were last given
        self._source: Dict[int, Optional[int]] = {}     # address -> the one instruction reaching it, or None
        visits: Dict[int, int] = {}
        work = []
        for address, state in seeds:
            self._merge(result, visits, work, address, state)
        self._unbounded: Optional[list] = []      # [(jump, targets, state)] of tables read without a bound
        self._bounded: Dict[int, set] = {}        # a table jump -> the targets its bounded reads found
        self._drain(result, visits, work)
        if pads:
            self._landing_pads(result, visits, work, pads)
        proven = set(result.states)
        self._follow_unbounded(result, visits, work, pads)
        self._assume_indirect_targets(result, visits, work)
        result.assumed |= set(result.states) - proven
        return result

    def _follow_unbounded(self, result, visits, work, pads):
        """Follow the tables read without a bound on their index last: the code only they reach is
        `assumed` (its entries were read while they were the function's instructions, which may run past
        the table's end into another table's entries)."""
        deferred, self._unbounded = self._unbounded, None
        for jump, targets, state in deferred:
            for target in targets:
                if result.start <= target < result.end:
                    self._merge(result, visits, work, target, state, jump)
                else:
                    self._exit(result, jump, target, state)
        self._drain(result, visits, work)
        if pads and deferred:
            self._landing_pads(result, visits, work, pads)

    def _merge(self, result, visits, work, address, state, source=None):
        """Join state into address's; source: the instruction it comes from (None: a seed, a landing
        pad). Where every path so far came from that one instruction, its newer state replaces the
        old one: the paths met before it, and were joined there (and this saves a join for every
        instruction inside a loop each time the loop goes round)."""
        if address in result.gave_up:
            return
        old = result.states.get(address)
        if old is None:
            result.states[address] = state
            self._source[address] = source
            work.append(address)
            return
        if source is not None and self._source.get(address) == source:
            merged = state
            changed = state is not old and (state.regs != old.regs or state.mem != old.mem)
        else:
            self._source[address] = None
            merged, changed = join(old, state, address)
            if changed and not result.stack_heights_differ:
                result.stack_heights_differ = _heights_differ(old, state, self.facts.SP)
        if changed and self._replaced(result, visits, address, merged):
            work.append(address)

    @staticmethod
    def _replaced(result, visits, address, state) -> bool:
        """A changed state at address, unless it changed too often: False, and the analysis gives up there."""
        count = visits.get(address, 0) + 1
        visits[address] = count
        if count > MAX_VISITS:
            result.gave_up[address] = "the paths reaching it did not settle"
            del result.states[address]
            return False
        result.states[address] = state
        return True

    def _drain(self, result, visits, work):
        facts = self.facts
        followed = self._followed
        states, insns, gave_up, sources = result.states, result.insns, result.gave_up, self._source
        start, end, sp = result.start, result.end, facts.SP
        merge, decoded = self._merge, self.decoded
        while work:
            address = work.pop()
            state = states.get(address)
            if state is None or followed.get(address) is state:
                continue        # the same state followed again would give its successors nothing new
            while True:
                followed[address] = state
                insn = insns.get(address)
                if insn is None:
                    insn = decoded.get(address) or self.decode_at(address)
                    if insn is None:
                        gave_up[address] = "cannot decode an instruction here"
                        del states[address]
                        break
                    insns[address] = insn
                if insn.effects or not insn.flags_kept and BOUND_PENDING in state.regs:
                    after = apply(insn, state, sp, share=True)
                else:
                    after = state           # apply's answer without the call (38% of python3.11's)
                if insn.flow is NEXT:
                    target = insn.end
                else:
                    # The others merged, the path goes straight on to the last (the work list's next).
                    successors = self._successors(result, insn, after)
                    if not successors:
                        break
                    for target, out in successors[:-1]:
                        if start <= target < end:
                            merge(result, visits, work, target, out, address)
                        else:
                            self._exit(result, address, target, out)
                    target, after = successors[-1]
                if not start <= target < end:
                    self._exit(result, address, target, after)
                    break
                if target in gave_up:
                    break
                old = states.get(target)
                if old is None:
                    states[target] = after          # reached first, from here: straight on
                    sources[target] = address
                    address, state = target, after
                    continue
                if sources.get(target) != address:
                    merge(result, visits, work, target, after, address)
                    break
                # Reached from here alone: _merge's replacement, then straight on as the work list
                # would go next (it would take target first, unless followed with this state).
                if after is old or (after.regs == old.regs and after.mem == old.mem) \
                        or not self._replaced(result, visits, target, after) \
                        or followed.get(target) is after:
                    break
                address, state = target, after

    @staticmethod
    def _exit(result, address, target, state):
        """A jump out of the function with its frame: one exit per jump and target, with the latest
        state (the states at a jump only grow more general as paths join there)."""
        slot = result.exit_slots.get((address, target))
        if slot is None:
            result.exit_slots[(address, target)] = len(result.exits)
            result.exits.append((target, state))
            result.exit_jumps.setdefault(target, address)
        else:
            result.exits[slot] = (target, state)

    def _successors(self, result, insn, state):
        facts = self.facts
        flow = insn.flow
        if flow is BRANCH:
            pending = state.regs.get(BOUND_PENDING)
            if pending is not None and pending[0] == Kind.ADDR:     # else branch_bound keeps the state
                return [(insn.target, branch_bound(insn, state, True)), (insn.end, branch_bound(insn, state, False))]
            return [(insn.target, state), (insn.end, state)]
        if flow is NEXT:
            return [(insn.end, state)]
        if flow == JUMP:
            if not result.start <= insn.target < result.end and entry_like(state, facts):
                result.returns = True                  # a tail call
                result.tail_calls.add(insn.target)
                return []
            return [(insn.target, state)]
        if flow == CALL:
            if self.noreturn(insn):
                return []
            callee = self.callee(insn)
            if callee.thunk is not None:
                after = state.copy()
                after.regs[callee.thunk] = addr(insn.end)
                return [(insn.end, after)]
            if callee.why:
                result.notes[insn.address] = callee.why
            return [(insn.end, self.after_call(insn, state, callee.popped, callee.clobbers))]
        if flow == RET:
            result.returns = True
            result.pops.add(insn.popped)
            return []
        if flow == Flow.COND_RET:
            result.returns = True
            return [(insn.end, state)]
        if flow == Flow.STOP:
            return []
        return self._indirect(result, insn, state)

    def after_call(self, insn, state, popped=0, clobbers=None):
        """The state a call returns with (or an exception lands with): callee-saved registers kept,
        the stack pointer above the arguments the callee popped; `clobbers`: the only registers
        a callee with a known contract changes (a stack probe), instead of the ABI's."""
        facts = self.facts
        sp = state.reg(facts.SP)
        after = state.copy_above(sp)            # the callee's frame overwrote everything below
        if sp[0] == Kind.STACK:
            if popped is None:
                after.regs[facts.SP] = POPS_UNKNOWN
            elif popped:
                after.regs[facts.SP] = plus(sp, popped)
        for number in facts.CALL_CLOBBERED if clobbers is None else clobbers:
            after.regs[number] = CLOBBERED
        if facts.RA_REGISTER is not None:
            after.regs[facts.RA_REGISTER] = OTHER
        return after

    def _landing_pads(self, result, visits, work, pads):
        """Enter each landing pad with the state after the calls of its call-site range, the stack
        pointer above the arguments still pushed for the call (DW_CFA_GNU_args_size: the unwinder adds
        it to the stack pointer it resumes the pad with, libgcc's uw_install_context_1)."""
        for _ in range(8):
            before = dict(result.states)
            for start, end, pad in pads:
                inside = result.start <= pad < result.end
                for address in [a for a in result.states if start <= a < end]:
                    insn = result.insns.get(address)
                    if insn is not None and insn.flow == Flow.CALL:
                        state = self.after_call(insn, apply(insn, result.states[address], self.facts.SP))
                        state = self._arguments_popped(state, self.args_size(address))
                        if inside:
                            self._merge(result, visits, work, pad, state)
                        elif (pad, state) not in result.exits:
                            result.exits.append((pad, state))
            self._drain(result, visits, work)
            if result.states == before:
                return

    def _arguments_popped(self, state, size):
        sp = state.reg(self.facts.SP)
        if not size or sp[0] != Kind.STACK:
            return state
        state.regs[self.facts.SP] = plus(sp, size)
        state.forget_below(state.regs[self.facts.SP])
        return state

    def _indirect(self, result, insn, state):
        expr = insn.indirect
        if expr is not None and expr[0] == "pc_table":     # a table branch: never a tail call
            targets = self._pc_table_targets(result, expr, state)
            if not targets:
                result.unresolved.append(insn.address)
            return [(t, state) for t in targets + ([insn.end] if expr[5] else [])]
        targets, bounded = self._table_targets(result, insn, state)
        if bounded:
            self._bounded.setdefault(insn.address, set()).update(targets)
        known = result.tables.get(insn.address) if self._unbounded is None \
            else (0, 0, True, tuple(self._bounded.get(insn.address, ())))
        if known is not None:
            # Read before with a bound this path lacks: those entries are still targets (every path's
            # state must reach them); an unbounded index may reach more: unresolved as well.
            if not targets and known[3]:
                result.unresolved.append(insn.address)
            targets = sorted(set(targets) | set(known[3]))
        if targets and not bounded and self._unbounded is not None:
            self._unbounded.append((insn.address, targets, state))     # followed once the bounded ones are
            return []
        if targets:
            return [(t, state) for t in targets]
        if entry_like(state, self.facts):
            result.returns = True                      # an indirect tail call
            return []
        if insn.through_memory and insn.indirect[1][0] == "addr":
            return []                                  # through a GOT slot: another function's code
        result.unresolved.append(insn.address)
        return []

    def _assume_indirect_targets(self, result, visits, work):
        """Code reached by no followed path, when every unresolved indirect jump agrees on the frame.

        Such code is almost always a jump table's target the analysis could
        not read. Its rows are marked `assumed`.
        """
        if not result.unresolved:
            return
        states = []
        for address in result.unresolved:
            state = result.states.get(address)
            if state is not None:
                states.append(apply(result.insns[address], state, self.facts.SP))
        if not states:
            return
        first = states[0]
        frame = (first.reg(self.facts.SP),) + tuple(first.reg(r) for r in self.facts.CALLEE_SAVED)
        for other in states[1:]:
            if (other.reg(self.facts.SP),) + tuple(other.reg(r) for r in self.facts.CALLEE_SAVED) != frame:
                return
        address = result.start
        reached_before = set(result.states)
        while address < result.end:
            insn = result.insns.get(address) or self.decode_at(address)
            if insn is None:
                break
            result.insns.setdefault(address, insn)
            if address not in result.states and address not in result.gave_up \
                    and not self.facts.is_padding(insn.text) \
                    and self._is_block_start(result, address):
                self._merge(result, visits, work, address, first)
                self._drain(result, visits, work)
            address = insn.end
        result.assumed = set(result.states) - reached_before

    def _is_block_start(self, result, address):
        """Unreached code right after a path's end (padding skipped): where a jump-table target begins."""
        for _ in range(64):
            previous = next((result.insns[address - back] for back in range(1, 16)
                             if address - back in result.insns
                             and result.insns[address - back].end == address), None)
            if previous is None:
                return True
            if self.facts.is_padding(previous.text) and previous.address not in result.states:
                address = previous.address
                continue
            return previous.flow not in (Flow.NEXT, Flow.BRANCH)
        return True


def _heights_differ(a: State, b: State, sp: int) -> bool:
    """Do two states put the stack pointer at two different known offsets from the CFA?"""
    x, y = a.regs.get(sp), b.regs.get(sp)
    return x is not None and y is not None and x[0] == y[0] == Kind.STACK and x != y
