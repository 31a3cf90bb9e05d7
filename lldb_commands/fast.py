"""The LLDB fast path of `unwind backtrace`: per-pc plans over the engine's own walk.

The engine (plugin/engine.py) tries the sources in order for every frame and
keeps what `unwind explain` shows. For a deep stack most frames share a few
pcs (a recursion: one), and the answer for a pc is, up to the values read,
always the same: the first table source that covers it, and its row. So:

- the first time a lookup pc is stepped, engine.step_frame does it; if the
  first source tried recovered the caller from a table row (no attempt
  before it, not outermost), that row is kept as the pc's plan;
- the next frames at that pc apply the plan's row, compiled once by the
  core's plan compiler (plugin.plans.compile_row, shared with GDB's
  unwinder) and applied as the engine's evaluator applies it
  (plans.evaluate_fast), or with that evaluator itself
  (plugin.strategies.evaluate) where the row is not plain, and check the
  result with the engine's own checks; anything else (no plan, a read that
  fails, a check that fails, an undefined return address) goes to
  engine.step_frame.

The walk loop, stop reasons, levels and names are engine.unwind's own (this
is its `step`), so the fast walk is the engine's walk frame by frame;
tests/lldb/test_lldb_fast.py compares them. Plans hold rows of the modules'
tables, never stack bytes, and are dropped when the modules change.
"""
from __future__ import annotations

from typing import Optional

from plugin import checks, engine
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome
from plugin.cache import BoundedCache
from plugin.plans import PLAN_CACHE_SIZE, compile_row, evaluate_fast
from plugin.settings import SourceKind, source_names
from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.strategies.row_step import return_address

# The table sources whose step ends in row_step.step_with_row (declared `planned`): a plan
# replays their row exactly as that step would (exidx's pc may come from r15: not planned)
TABLE_SOURCES = source_names(SourceKind.TABLE, planned=True)


class FirstStep:
    """What the first step at a lookup pc found, to repeat at that pc: its source, found-by words,
    row (and its FastRow), signal mark."""

    __slots__ = ("source", "found_by", "row", "signal_frame", "fast")

    def __init__(self, outcome: Outcome, arch) -> None:
        self.source = outcome.source
        self.found_by = outcome.evidence.found_by
        self.row = outcome.evidence.rule
        self.signal_frame = outcome.signal_frame
        self.fast = compile_row(self.row, arch)     # None: evaluate_row applies it


class Plans:
    """The plans of one target, keyed by (lookup pc, exact pc, sources), for one module generation."""

    def __init__(self) -> None:
        self.entries = BoundedCache("backtrace plans", PLAN_CACHE_SIZE)    # key -> FirstStep
        self.hits = 0           # plans applied (the engine's checks passed)

    def stepper(self, generation: int):
        """engine.unwind's `step` for a walk of a target at module generation `generation`."""
        self.entries.for_generation(generation)
        return self.step

    def step(self, frame, ctx, previous_cfa):
        key = (ctx.lookup_pc(frame), frame.exact_pc, ctx.sources)
        plan = self.entries.get(key)
        if plan is not None:
            outcome = _apply(plan, key[0], frame, ctx, previous_cfa)
            if outcome is not None:
                self.hits += 1
                return outcome, []
        outcome, attempts = engine.step_frame(frame, ctx, previous_cfa)
        if (outcome is not None and not attempts and not outcome.outermost and outcome.source in TABLE_SOURCES
                and outcome.evidence is not None and outcome.evidence.rule is not None):
            self.entries.put(key, FirstStep(outcome, ctx.arch))
        return outcome, attempts


def _apply(plan: FirstStep, lookup_pc: int, frame, ctx, previous_cfa) -> Optional[Outcome]:
    """The caller by the plan's row, as row_step.step_with_row finds it; None: let the engine step."""
    arch = ctx.arch
    if plan.fast is not None:
        evaluated = evaluate_fast(plan.fast, arch, frame.registers, ctx.read_memory)
        if evaluated is None or arch.ra in plan.fast.undefined:
            return None
        (cfa, caller), reads = evaluated, []
    else:
        try:
            result = evaluate_row(plan.row, arch, frame.registers, ctx.read_memory)
        except RowError:
            return None
        if arch.ra in result.undefined:
            return None
        cfa, caller, reads = result.cfa, result.registers, result.reads
    caller, _ = return_address(plan.row, arch, frame.registers, caller)
    if caller is None:
        return None
    evidence = StepEvidence(source=plan.source, found_by=plan.found_by, lookup_pc=lookup_pc, rule=plan.row,
                            arch=arch, cfa=cfa, reads=reads, caller_registers=caller)
    outcome = Outcome(AttemptStatus.RECOVERED, plan.source, registers=caller, evidence=evidence,
                      signal_frame=plan.signal_frame)
    if checks.implausible(outcome, frame, ctx, frame.registers.get(arch.sp), previous_cfa):
        return None
    return outcome
