"""Per lookup-pc plans: the row the engine accepted there, replayed without building evidence.

A debugger's unwinder asks for the same pcs again and again (every `bt` of
a deep recursion, every stop in the same loop). The engine's answer for a
pc depends on the pc (which module, which table, which row) and on the
registers and memory the row reads. A plan keeps the first part: the row a
table source gave for that lookup pc, with the frame's function start. A
replay applies that row with the engine's own evaluator and runs the
engine's own checks, so it gives what the engine gives, or declines and
the engine runs in full.

A plan whose row is plain (CFA = register + offset, or the word there plus
an offset; every rule a load from
CFA + offset, CFA + offset, another register, same or undefined; the return
address in the pc column, unsigned) also carries it as a FastRow: the same
rules as tuples, which replay_fast applies to a complete register file
(the registers a previous claim handed on) with no evaluator, no Read
records and no evidence, and the same checks as replay.

The `analysis` source's row is the function's code read from its start to
the pc, so it too depends on the pc alone, when that start does (found by
a symbol or a neighbouring table entry, which are tried first: not by the
call on the stack that reached the function, nor by a prologue, tried after
it); its plan also keeps the source's own
check, that the return address follows a call (or starts a signal
trampoline). So the analysis of a pc is a one-time cost.

The `orc` source's rule is an ORC entry, no Row; a plain CALL entry (CFA =
sp or bp + offset, the return address at CFA-8, bp unchanged or saved at
the CFA) amounts to one, which its rule gives (OrcRule.row) and a plan
replays, and so does a CALL entry whose CFA is the word at sp or bp (the IRQ
stack's switch to the task stack). Such a row switches stacks: its replay
keeps the CFA-above-sp check, which the engine drops across a switch, and
leaves a switch to the engine where memory mappings are known (the engine
then checks the CFA is stack memory). Other entries (pt_regs, the end of the
stack) and ftrace's trampolines are not planned.

Only rows that the engine accepted first time are planned: when a source
before it failed or was rejected (which depends on registers and memory,
not on the pc), the next frame at that pc may go differently. Plans are
dropped with the modules (the owner's generation) and are independent of
any debugger; GDB's unwinder uses them, LLDB's provider may.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from plugin.arch import Arch
from plugin.cache import BoundedCache
from plugin.errors import MemoryReadError
from plugin.model.outcome import AttemptStatus
from plugin.model.rules import CfaKind, Row, RuleKind
from plugin.settings import Trust, source_names
from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.strategies.function_start import StartBy
from plugin.strategies.row_step import return_address

ANALYSIS = Trust.ANALYSIS.value
PLANNED_SOURCES = source_names(planned=True)      # sources whose step ends in row_step.step_with_row
AFTER_CALL_SOURCES = (ANALYSIS,)    # sources that also check that the return address follows a call
PC_STARTS = (StartBy.SYMBOL, StartBy.TABLE)     # analysis starts found from the pc alone, tried before any other
PLAN_CACHE_SIZE = 1 << 14
MAX_SPAN = 512          # bytes: a FastRow's saved registers are read in one piece up to this size


@dataclass(frozen=True)
class FastRow:
    """A plain row as tuples of DWARF numbers (see the module doc): the one compiled form of a
    row, applied by replay_fast (GDB: a whole register file) and by evaluate_fast (LLDB's
    `unwind backtrace`: evaluate_row's answer without its records of reads)."""
    cfa_register: int
    cfa_offset: int
    loads: tuple            # (number, offset): the caller's value is the word at CFA + offset
    sums: tuple             # (number, offset): the caller's value is CFA + offset
    copies: tuple           # (number, source): the caller's value is the callee's source register (same: itself)
    undefined: tuple        # numbers with no value in the caller
    written: tuple          # numbers whose caller value the row computes: sp, loads, sums, copies
    span: tuple             # (lowest load offset, bytes up to the end of the highest load): one read
    whole_file: bool = True     # replay_fast may apply it: the return address is the pc column's own
    #                             rule (a load, sum or copy), unsigned, and the architecture's
    #                             return_to leaves it as it is
    cfa_deref: bool = False     # the CFA is the word at cfa_register + cfa_offset, plus cfa_added
    cfa_added: int = 0


@dataclass(frozen=True)
class ReplayPlan:
    """The row the engine accepted at a lookup pc, and what replaying it needs and checks."""
    source: str
    row: Row
    start: int              # the entry's start: the frame id's function
    exact_pc: bool          # the frame's pc is not a return address (a CFA equal to sp is allowed)
    fast: Optional[FastRow] = None
    after_call: bool = False    # the return address must follow a call (UnwindContext.follows_call)
    switches: bool = False      # the row moves to another stack (evidence.stack_switch)


def compile_row(row: Row, arch) -> Optional[FastRow]:
    """row as a FastRow, or None where only evaluate_row applies it as the engine does: a CFA
    expression, an expression rule, a rule for a register the architecture's
    register list does not name. The FastRow's whole_file is False for a signed return address,
    an architecture whose return address is not the pc column or whose return_to rewrites it,
    and a pc column that is missing, undefined or same (outermost, or a return address only the
    engine explains)."""
    cfa = row.cfa
    if cfa.kind != CfaKind.REGISTER:
        return None
    loads, sums, copies, undefined = [], [], [], []
    for number, rule in row.registers.items():
        if number not in arch.registers:
            return None
        kind = rule.kind
        if kind == RuleKind.OFFSET:
            loads.append((number, rule.offset))
        elif kind == RuleKind.VAL_OFFSET:
            sums.append((number, rule.offset))
        elif kind == RuleKind.REGISTER:
            copies.append((number, rule.register))
        elif kind == RuleKind.SAME:
            copies.append((number, number))     # the callee's own value (sp's too, not the CFA)
        elif kind == RuleKind.UNDEFINED:
            undefined.append(number)
        else:
            return None
    ra = row.registers.get(arch.pc)
    whole_file = (not row.ra_signed and arch.ra == arch.pc and type(arch).return_to is Arch.return_to
                  and ra is not None and ra.kind not in (RuleKind.UNDEFINED, RuleKind.SAME))
    written = tuple(dict.fromkeys([arch.sp] + [n for n, _ in loads + sums + copies]))
    offsets = [offset for _, offset in loads]
    span = (min(offsets), max(offsets) + arch.address_size - min(offsets)) if offsets else (0, 0)
    return FastRow(cfa.register, cfa.offset, tuple(loads), tuple(sums), tuple(copies), tuple(undefined),
                   written, span, whole_file, cfa.deref, cfa.added)


@dataclass
class Replay:
    """What a replayed plan gives: the caller's registers and this frame's CFA."""
    registers: dict
    cfa: int
    start: int


class PlanCache:
    """lookup pc -> ReplayPlan, for one UnwindContext (sources) and one generation of its modules."""

    def __init__(self, owner=None):
        self.owner = owner      # what the plans were made for (the debugger's unwinder context)
        self.entries = BoundedCache("plans", PLAN_CACHE_SIZE)     # (lookup pc, exact pc) -> ReplayPlan
        self.hits = 0           # plans replayed (the debugger's unwinder counts them)
        self.fast_hits = 0      # of those, replays of a FastRow (replay_fast)

    def clear(self, owner=None):
        self.entries.clear()
        self.owner = owner

    def get(self, lookup_pc: int, exact_pc: bool) -> Optional[ReplayPlan]:
        return self.entries.get((lookup_pc, exact_pc))

    def remember(self, lookup_pc: int, exact_pc: bool, outcome, attempts) -> Optional[ReplayPlan]:
        """Keep the engine's accepted outcome as a plan when replaying it is safe (see the module doc);
        the plan, or None when it is not planned."""
        evidence = outcome.evidence
        row = _planned_row(outcome)
        if (row is None or outcome.outermost or outcome.signal_frame
                or any(a.outcome != AttemptStatus.NOT_APPLICABLE for a in attempts)
                or (outcome.source == ANALYSIS and evidence.entry.get("start_by") not in PC_STARTS)):
            return None
        start = evidence.entry.get("start", lookup_pc)
        fast = compile_row(row, evidence.arch) if evidence.arch is not None else None
        if fast is not None and not fast.whole_file:
            fast = None             # replay (the evaluator) applies it
        return self.entries.put((lookup_pc, exact_pc), ReplayPlan(
            outcome.source, row, start, exact_pc, fast, outcome.source in AFTER_CALL_SOURCES,
            bool(getattr(evidence, "stack_switch", False))))


def _planned_row(outcome) -> Optional[Row]:
    """The Row a plan replays: a planned source's row, or the row a rule that is no Row gives where
    it is plain (ORC's CALL entries: plugin.strategies.orc.plain_row); else None."""
    rule = getattr(outcome.evidence, "rule", None)
    if isinstance(rule, Row):
        return rule if outcome.source in PLANNED_SOURCES else None
    row = getattr(rule, "row", None)
    return row if isinstance(row, Row) else None


def replay(plan: ReplayPlan, registers, ctx) -> Optional[Replay]:
    """The caller's registers under plan's row, checked as the engine checks an answer
    (CFA above sp, return address in code); None where the engine must decide instead."""
    arch = ctx.arch
    if plan.switches and ctx.knows_mappings():
        return None             # the engine checks the new stack's CFA against the mappings
    try:
        result = evaluate_row(plan.row, arch, registers, ctx.read_memory)
    except (RowError, MemoryReadError):
        return None
    if arch.ra in result.undefined:
        return None             # outermost: the engine says so, with its reason
    caller, _ = return_address(plan.row, arch, registers, result.registers)
    if caller is None:
        return None
    ra = caller[arch.pc]
    cfa, sp = result.cfa, registers.get(arch.sp)
    if sp is None or cfa < sp or (cfa == sp and not plan.exact_pc):
        return None
    if ra != 0 and not ctx.is_code(ra):
        return None
    if plan.after_call and ra != 0 and not ctx.follows_call(ra):
        return None
    return Replay(caller, cfa, plan.start)


def load_saved(fast: FastRow, cfa: int, arch, read_memory, caller: dict) -> bool:
    """Put the values of fast's loads at cfa into caller: in one read when they lie within
    MAX_SPAN bytes (a frame's saves sit together below its CFA), else (or where that read fails:
    a span across an unreadable page) a word at a time; False if one cannot be read."""
    size, order = arch.address_size, arch.byteorder
    low, length = fast.span
    if length <= MAX_SPAN and 0 <= cfa + low and cfa + low + length <= arch.mask:
        try:
            data = read_memory(cfa + low, length)
        except MemoryReadError:
            data = None
        if data is not None:
            for number, offset in fast.loads:
                at = offset - low
                caller[number] = int.from_bytes(data[at:at + size], order)
            return True
    try:
        for number, offset in fast.loads:
            caller[number] = int.from_bytes(read_memory((cfa + offset) & arch.mask, size), order)
    except MemoryReadError:
        return False
    return True


def fast_cfa(fast: FastRow, base: int, arch, read_memory) -> Optional[int]:
    """The CFA fast's rule gives for its register's value base; None where its word cannot be read."""
    cfa = (base + fast.cfa_offset) & arch.mask
    if not fast.cfa_deref:
        return cfa
    try:
        word = int.from_bytes(read_memory(cfa, arch.address_size), arch.byteorder)
    except MemoryReadError:
        return None
    return (word + fast.cfa_added) & arch.mask


def evaluate_fast(fast: FastRow, arch, registers: dict, read_memory):
    """(CFA, caller registers) as evaluate_row gives them for fast's row (callee-saved registers
    kept, the others only by a rule; sp the CFA unless a rule says otherwise), without its
    records of each read; None where evaluate_row raises (the CFA's register unknown, a saved
    register unreadable)."""
    base = registers.get(fast.cfa_register)
    if base is None:
        return None
    mask = arch.mask
    cfa = fast_cfa(fast, base, arch, read_memory)
    if cfa is None:
        return None
    caller = {number: registers[number] for number in arch.callee_saved if number in registers}
    caller[arch.sp] = cfa
    if fast.loads and not load_saved(fast, cfa, arch, read_memory, caller):
        return None
    for number, offset in fast.sums:
        caller[number] = (cfa + offset) & mask
    for number, source in fast.copies:
        value = registers.get(source)
        if value is not None:
            caller[number] = value
        elif number != source:
            caller.pop(number, None)        # evaluate_row: a same rule without a value changes nothing
    for number in fast.undefined:
        caller.pop(number, None)
    return cfa, caller


def replay_fast(plan: ReplayPlan, values: dict, ctx) -> Optional[Replay]:
    """What replay gives, for a plan with a FastRow and a complete register file `values`
    (DWARF number -> int, every register the callee has): the caller's whole register file
    (callee values kept where no rule changes them, as GDB's unspecified rule and the ABI's
    callee-saved rule both give; undefined ones left out), its sp the CFA unless a rule says
    otherwise and its pc the return address; None where replay would decline."""
    fast = plan.fast
    arch = ctx.arch
    mask = arch.mask
    base = values.get(fast.cfa_register)
    sp = values.get(arch.sp)
    if base is None or sp is None or plan.switches and ctx.knows_mappings():
        return None
    cfa = fast_cfa(fast, base, arch, ctx.read_memory)
    if cfa is None or cfa < sp or (cfa == sp and not plan.exact_pc):
        return None
    caller = dict(values)
    caller[arch.sp] = cfa
    if fast.loads and not load_saved(fast, cfa, arch, ctx.read_memory, caller):
        return None
    for number, offset in fast.sums:
        caller[number] = (cfa + offset) & mask
    for number, source in fast.copies:
        value = values.get(source)
        if value is None:
            caller.pop(number, None)
        else:
            caller[number] = value
    for number in fast.undefined:
        caller.pop(number, None)
    ra = caller.get(arch.pc)
    if ra is None or (ra != 0 and (not ctx.is_code(ra) or plan.after_call and not ctx.follows_call(ra))):
        return None
    return Replay(caller, cfa, plan.start)
