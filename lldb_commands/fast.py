"""The LLDB fast path of `unwind backtrace`: per-pc plans over the engine's own walk.

The engine (plugin/engine.py) tries the sources in order for every frame and
keeps what `unwind explain` shows. For a deep stack most frames share a few
pcs (a recursion: one), and the answer for a pc is, up to the values read,
always the same: the first table source that covers it, and its row. So:

- the first time a lookup pc is stepped, engine.step_frame does it; if the
  first source tried recovered the caller from a table row (no attempt
  before it, not outermost), that row is kept as the pc's plan;
- the next frames at that pc evaluate the plan's row with the engine's own
  evaluator (plugin.strategies.evaluate) and check the result with the
  engine's own checks; anything else (no plan, a read that fails, a check
  that fails, an undefined return address) goes to engine.step_frame.

The walk loop, stop reasons, levels and names are engine.unwind's own (this
is its `step`), so the fast walk is the engine's walk frame by frame;
tests/lldb/test_lldb_fast.py compares them. Plans hold rows of the modules'
tables, never stack bytes, and are dropped when the modules change.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from plugin import checks, engine
from plugin.errors import MemoryReadError
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome
from plugin.model.rules import CfaKind, RuleKind
from plugin.settings import SourceKind, source_names
from plugin.strategies.evaluate import UnwindError, evaluate_row

TABLE_SOURCES = source_names(SourceKind.TABLE)


class Plan:
    """What the first step at a lookup pc found: its source, found-by words, row, signal mark."""

    __slots__ = ("source", "found_by", "row", "signal_frame", "simple", "saved")

    def __init__(self, outcome: Outcome, arch) -> None:
        self.source = outcome.source
        self.found_by = outcome.evidence.found_by
        self.row = outcome.evidence.rule
        self.signal_frame = outcome.signal_frame
        self.simple = is_simple(self.row)
        self.saved = saved_span(self.row, arch.address_size) if self.simple else None


class Plans:
    """The plans of one target, keyed by (lookup pc, exact pc, sources), for one module generation."""

    def __init__(self) -> None:
        self._plans: Dict[Tuple, Plan] = {}
        self._generation = None
        self.hits = 0

    def stepper(self, generation: int):
        """engine.unwind's `step` for a walk of a target at module generation `generation`."""
        if generation != self._generation:
            self._plans.clear()
            self._generation = generation
        return self.step

    def step(self, frame, ctx, previous_cfa):
        key = (ctx.lookup_pc(frame), frame.exact_pc, ctx.sources)
        plan = self._plans.get(key)
        if plan is not None:
            outcome = _apply(plan, key[0], frame, ctx, previous_cfa)
            if outcome is not None:
                self.hits += 1
                return outcome, []
        outcome, attempts = engine.step_frame(frame, ctx, previous_cfa)
        if (outcome is not None and not attempts and not outcome.outermost and outcome.source in TABLE_SOURCES
                and outcome.evidence is not None and outcome.evidence.rule is not None):
            self._plans[key] = Plan(outcome, ctx.arch)
        return outcome, attempts


def _apply(plan: Plan, lookup_pc: int, frame, ctx, previous_cfa) -> Optional[Outcome]:
    """The caller by the plan's row, as row_step.step_with_row finds it; None: let the engine step."""
    arch = ctx.arch
    if plan.simple:
        try:
            cfa, caller = _evaluate_simple(plan.row, plan.saved, arch, frame.registers, ctx.read_memory)
        except (MemoryReadError, KeyError):
            return None
        reads = []
    else:
        try:
            result = evaluate_row(plan.row, arch, frame.registers, ctx.read_memory)
        except UnwindError:
            return None
        if arch.ra in result.undefined:
            return None
        cfa, caller, reads = result.cfa, result.registers, result.reads
    ra = caller.get(arch.ra)
    if ra is None:
        return None
    if plan.row.ra_signed:
        ra = arch.strip_pointer_auth(ra)
    caller[arch.pc] = ra
    evidence = StepEvidence(source=plan.source, found_by=plan.found_by, lookup_pc=lookup_pc, rule=plan.row,
                            arch=arch, cfa=cfa, reads=reads, caller_registers=caller)
    outcome = Outcome(AttemptStatus.RECOVERED, plan.source, registers=caller, evidence=evidence,
                      signal_frame=plan.signal_frame)
    if checks.implausible(outcome, frame, ctx, frame.registers.get(arch.sp), previous_cfa):
        return None
    return outcome


# The rules _evaluate_simple applies; a row with any other rule is evaluated by evaluate_row.
SIMPLE_RULES = (RuleKind.SAME, RuleKind.OFFSET, RuleKind.VAL_OFFSET)


def is_simple(row) -> bool:
    """CFA = register + offset and every rule SAME, OFFSET or VAL_OFFSET (no expression, no undefined)."""
    return (row.cfa.kind == CfaKind.REGISTER and not row.cfa.deref
            and all(rule.kind in SIMPLE_RULES for rule in row.registers.values()))


# The most bytes one read may span to fetch all the registers a simple row saves
# (a frame's saves sit together below its CFA); a wider span reads word by word.
SAVED_SPAN = 128


def saved_span(row, size: int) -> Optional[Tuple[int, int, Tuple[Tuple[int, int], ...]]]:
    """(first offset from the CFA, bytes, ((register, its offset in the span), ...)) of the row's
    OFFSET rules, read at once; None when it has none or they lie more than SAVED_SPAN apart."""
    saved = [(number, rule.offset) for number, rule in row.registers.items() if rule.kind == RuleKind.OFFSET]
    if not saved:
        return None
    low = min(offset for _, offset in saved)
    length = max(offset for _, offset in saved) - low + size
    if length > SAVED_SPAN:
        return None
    return low, length, tuple((number, offset - low) for number, offset in saved)


def _evaluate_simple(row, saved, arch, registers, read_memory):
    """(CFA, caller registers) of a simple row: evaluate_row's answer without its records of each read.

    saved: the row's saved_span, whose words are read in one read. KeyError
    when the CFA's register is unknown, MemoryReadError when a saved
    register cannot be read: the engine then steps the frame and says why.
    """
    mask, size, order = arch.mask, arch.address_size, arch.byteorder
    cfa = (registers[row.cfa.register] + row.cfa.offset) & mask
    caller = {number: registers[number] for number in arch.callee_saved if number in registers}
    caller[arch.sp] = cfa
    if saved is not None:
        low, length, places = saved
        data = read_memory((cfa + low) & mask, length)
        words = {number: int.from_bytes(data[at:at + size], order) for number, at in places}
    for number, rule in row.registers.items():
        if rule.kind == RuleKind.OFFSET:
            caller[number] = (words[number] if saved is not None
                              else int.from_bytes(read_memory((cfa + rule.offset) & mask, size), order))
        elif rule.kind == RuleKind.VAL_OFFSET:
            caller[number] = (cfa + rule.offset) & mask
        elif number in registers:       # SAME
            caller[number] = registers[number]
    return cfa, caller
