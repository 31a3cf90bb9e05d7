"""Per lookup-pc plans: the row the engine accepted there, replayed without building evidence.

A debugger's unwinder asks for the same pcs again and again (every `bt` of
a deep recursion, every stop in the same loop). The engine's answer for a
pc depends on the pc (which module, which table, which row) and on the
registers and memory the row reads. A plan keeps the first part: the row a
table source gave for that lookup pc, with the frame's function start. A
replay applies that row with the engine's own evaluator and runs the
engine's own checks, so it gives what the engine gives, or declines and
the engine runs in full.

Only rows that the engine accepted first time are planned: when a source
before it failed or was rejected (which depends on registers and memory,
not on the pc), the next frame at that pc may go differently. Plans are
dropped with the modules (the owner's generation) and are independent of
any debugger; GDB's unwinder uses them, LLDB's provider may.
"""

from dataclasses import dataclass
from typing import Optional

from plugin.errors import MemoryReadError
from plugin.model.outcome import AttemptStatus
from plugin.model.rules import Row
from plugin.strategies.evaluate import UnwindError, evaluate_row
from plugin.strategies.row_step import return_address

PLANNED_SOURCES = ("cfi", "sframe")     # table sources whose step is exactly row_step.step_with_row
PLAN_CACHE_SIZE = 1 << 14


@dataclass(frozen=True)
class Plan:
    source: str
    row: Row
    start: int              # the entry's start: the frame id's function
    exact_pc: bool          # the frame's pc is not a return address (a CFA equal to sp is allowed)


@dataclass
class Replay:
    """What a replayed plan gives: the caller's registers and this frame's CFA."""
    registers: dict
    cfa: int
    start: int


class PlanCache:
    """lookup pc -> Plan, for one UnwindContext (sources) and one generation of its modules."""

    def __init__(self, owner=None):
        self.owner = owner      # what the plans were made for (the debugger's unwinder context)
        self._plans = {}
        self.hits = 0

    def clear(self, owner=None):
        self._plans.clear()
        self.owner = owner

    def get(self, lookup_pc: int, exact_pc: bool) -> Optional[Plan]:
        return self._plans.get((lookup_pc, exact_pc))

    def remember(self, lookup_pc: int, exact_pc: bool, outcome, attempts) -> None:
        """Keep the engine's accepted outcome as a plan when replaying it is safe (see the module doc)."""
        evidence = outcome.evidence
        if (outcome.source not in PLANNED_SOURCES or outcome.outermost or outcome.signal_frame
                or evidence is None or not isinstance(evidence.rule, Row)
                or any(a.outcome != AttemptStatus.NOT_APPLICABLE for a in attempts)):
            return
        if len(self._plans) >= PLAN_CACHE_SIZE:
            self._plans.clear()
        start = evidence.entry.get("start", lookup_pc)
        self._plans[(lookup_pc, exact_pc)] = Plan(outcome.source, evidence.rule, start, exact_pc)


def replay(plan: Plan, registers, ctx) -> Optional[Replay]:
    """The caller's registers under plan's row, checked as the engine checks an answer
    (CFA above sp, return address in code); None where the engine must decide instead."""
    arch = ctx.arch
    try:
        result = evaluate_row(plan.row, arch, registers, ctx.read_memory)
    except (UnwindError, MemoryReadError):
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
    return Replay(caller, cfa, plan.start)
