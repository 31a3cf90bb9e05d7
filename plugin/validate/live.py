"""`unwind validate`: each table source checked against the truth of one real call.

At a function's first instruction the truth about its frame is known
without any table: the ABI's entry rule gives the CFA (the caller's stack
pointer after the return) and the return address, and every callee-saved
register still holds the caller's value. The debugger adapter then steps
the function instruction by instruction (stepping over calls) until it
returns; at every stop each source is asked, through its own strategy,
what the caller's registers are, and its answer is compared with that
truth. An item is wrong only when a value was computed and differs from
the one known at entry; a source with no row for the pc is "not covered",
and one whose row cannot be applied for want of a register is "unknown".

This module holds no debugger code: the adapters (gdb_unwinder/validate.py,
lldb_commands/validate.py) feed it registers and tell it how stepping ended.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Optional, Sequence

from plugin.analysis.ops import Flow
from plugin.errors import MemoryReadError
from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus, FailureKind
from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.validate.code import Verdict

SHOWN_WRONG = 12                # wrong addresses listed in a summary line before "..."

# Sources exact only at some instructions: compact unwind describes a
# function's body, so it is judged where callers are stopped (calls) and
# where the ABI's rule replaces it (the entry, returns); elsewhere it is
# counted apart, never wrong. EHABI opcodes likewise describe the body where
# it calls (plugin.validate.ehabi_live judges the entry's own row).
EXACT_ONLY_AT = {"compact": (Flow.CALL, Flow.RET), "exidx": (Flow.CALL,)}

# A failure with a row in force is a wrong answer when it comes from the
# row's own values (it pointed at unreadable memory, or gave no return
# address); other failures (a register the row needs is unknown, an
# undecodable entry) say nothing about the row's truth.
WRONG_FAILURES = (FailureKind.UNREADABLE_MEMORY, FailureKind.NO_RETURN_ADDRESS)


class Ending(str, Enum):
    """How the stepping ended."""
    RETURNED = "returned"          # the function returned to its caller: the whole call was checked
    STEP_LIMIT = "step-limit"      # the bound on steps was reached first
    EXITED = "exited"              # the process exited (or was killed) while stepping
    INTERRUPTED = "interrupted"    # another stop (a breakpoint, a signal) came first
    FAILED = "failed"              # the debugger could not step


ENDING_TEXT = {
    Ending.RETURNED: "the function returned to its caller",
    Ending.STEP_LIMIT: "stopped after %(steps)d steps, before the function returned (-steps raises the bound)",
    Ending.EXITED: "the process exited while stepping",
    Ending.INTERRUPTED: "stepping was interrupted: %(detail)s",
    Ending.FAILED: "stepping failed: %(detail)s",
}


@dataclass
class Truth:
    """What the caller's registers are, as known at the function's entry."""
    entry: int
    cfa: int
    return_address: int
    saved: Dict[int, int]           # callee-saved DWARF number -> the caller's value


def truth_at_entry(arch, registers: Dict[int, int], read_memory) -> Truth:
    """The ABI's entry rule applied to the registers at a function's first instruction.

    ValueError (one line) when the architecture has no entry rule or the
    stack cannot be read there.
    """
    pc = registers.get(arch.pc)
    row = arch.entry_row(pc) if pc is not None else None
    if row is None:
        raise ValueError("no entry rule is known for %s" % arch.name)
    try:
        result = evaluate_row(row, arch, registers, read_memory)
    except RowError as exc:
        raise ValueError("cannot apply the entry rule at 0x%x: %s" % (pc, exc.reason)) from None
    ra = result.registers.get(arch.ra)
    if ra is None:
        raise ValueError("the return address is not known at 0x%x" % pc)
    saved = {n: registers[n] for n in arch.callee_saved
             if n in registers and n not in (arch.ra, arch.sp, arch.pc)}
    # the pc the caller resumes at (on Arm without the Thumb bit of lr)
    return Truth(pc, result.cfa, arch.return_to(arch.strip_pointer_auth(ra), registers, {}), saved)


@dataclass
class Miss:
    """One item a source predicted wrongly."""
    item: str                       # "cfa", "return address" or a register name
    predicted: Optional[int]
    true: int

    def to_json(self) -> dict:
        return {"item": self.item, "predicted": self.predicted, "true": self.true}


@dataclass
class WrongStep:
    """A source's wrong answer at one instruction (its first occurrence)."""
    source: str
    address: int
    place: str                      # "+0x4" or "other+0x10"
    instruction: str
    row: str                        # the row in force, as text ("" when there was none)
    misses: List[Miss] = field(default_factory=list)
    reason: str = ""                # for a row that could not be applied

    def to_json(self) -> dict:
        return {"source": self.source, "address": self.address, "place": self.place,
                "instruction": self.instruction, "row": self.row, "reason": self.reason,
                "items": [m.to_json() for m in self.misses]}


@dataclass
class SourceTally:
    """Per source: the verdict at each distinct address (the worst over its executions)."""
    verdicts: Dict[int, Verdict] = field(default_factory=dict)
    uncovered: set = field(default_factory=set)
    not_judged: set = field(default_factory=set)      # where the source does not claim to be exact
    reasons: Dict[int, str] = field(default_factory=dict)     # unknown address -> why

    def note(self, address: int, verdict: Verdict) -> None:
        rank = {Verdict.RIGHT: 0, Verdict.UNKNOWN: 1, Verdict.WRONG: 2}
        old = self.verdicts.get(address)
        if old is None or rank[verdict] > rank[old]:
            self.verdicts[address] = verdict

    def addresses(self, verdict: Verdict) -> List[int]:
        return sorted(a for a, v in self.verdicts.items() if v == verdict)

    def to_json(self) -> dict:
        return {"checked": len(self.verdicts), "right": len(self.addresses(Verdict.RIGHT)),
                "wrong": self.addresses(Verdict.WRONG), "unknown": self.addresses(Verdict.UNKNOWN),
                "not_covered": len(self.uncovered - set(self.verdicts)),
                "not_judged": len(self.not_judged - set(self.verdicts))}


class LiveValidation:
    """The comparison core: feed it the registers at each stop, then ask for the report."""

    def __init__(self, ctx_for_source, arch, sources: Sequence[str], strategies, truth: Truth,
                 symbol=None, decode=None):
        """ctx_for_source(source) -> UnwindContext with that source alone; strategies:
        source -> step function; symbol(address) -> (name, start) or None;
        decode(address) -> plugin.analysis.ops.Insn or None (see decoder())."""
        self.arch = arch
        self.truth = truth
        self.sources = [s for s in sources if s in strategies]
        from plugin.validate.ehabi_live import TABLE_STEPS
        self.steps = {s: TABLE_STEPS.get(s, strategies[s]) for s in self.sources}
        self.contexts = {s: ctx_for_source(s) for s in self.sources}
        self.symbol = symbol
        self.decode = decode
        self.function_end = None        # the end of the entry's CFI range, when the adapter knows it
        self.tallies = {s: SourceTally() for s in self.sources}
        self.wrong: List[WrongStep] = []
        self._wrong_seen = set()
        self.path: List[int] = []       # distinct addresses, in the order first reached
        self._seen = set()

    def returned(self, registers: Dict[int, int]) -> bool:
        """Has the function returned: pc at the return address with the stack popped to the CFA?"""
        return (registers.get(self.arch.pc) == self.truth.return_address
                and registers.get(self.arch.sp) == self.truth.cfa)

    def observe(self, registers: Dict[int, int]) -> None:
        """Judge every source at the stop these registers describe."""
        pc = registers[self.arch.pc]
        if pc not in self._seen:
            self._seen.add(pc)
            self.path.append(pc)
        for source in self.sources:
            if not self._claims_exact(source, pc):
                self.tallies[source].not_judged.add(pc)
                continue
            ctx = self.contexts[source]
            ctx.forget_process_state()
            frame = Frame(level=0, pc=pc, registers=dict(registers), method="context", exact_pc=True)
            try:
                outcome = self.steps[source](frame, ctx)
            except Exception as exc:          # a strategy bug: unknown here, never a traceback
                self._unknown(source, pc, "internal error: %s: %s" % (type(exc).__name__, exc))
                continue
            self._judge(source, pc, outcome)

    def _claims_exact(self, source, pc):
        kinds = EXACT_ONLY_AT.get(source)
        if kinds is None or pc == self.truth.entry:
            return True
        insn = self._insn(pc)
        return insn is not None and insn.flow in kinds

    def _judge(self, source, pc, outcome):
        tally = self.tallies[source]
        evidence = outcome.evidence
        row = evidence.row if evidence is not None and evidence.rule is not None else ""
        if outcome.status == AttemptStatus.NOT_APPLICABLE:
            tally.uncovered.add(pc)
            return
        if outcome.status != AttemptStatus.RECOVERED:
            if outcome.kind in WRONG_FAILURES and row:
                tally.note(pc, Verdict.WRONG)
                self._record(WrongStep(source, pc, "", "", row, [], outcome.reason))
            else:
                self._unknown(source, pc, outcome.reason)
            return
        if outcome.outermost:
            self._unknown(source, pc, "the row marks an outermost frame")
            return
        misses = self.misses(evidence.cfa, outcome.registers)
        tally.note(pc, Verdict.WRONG if misses else Verdict.RIGHT)
        if misses:
            self._record(WrongStep(source, pc, "", "", row, misses))

    def misses(self, cfa: Optional[int], caller: Dict[int, int]) -> List[Miss]:
        """What a recovered caller gets wrong: CFA, return address, each callee-saved register it gives."""
        truth, arch = self.truth, self.arch
        out = []
        if cfa != truth.cfa:
            out.append(Miss("cfa", cfa, truth.cfa))
        ra = caller.get(arch.pc)
        if ra is None or arch.strip_pointer_auth(ra) != truth.return_address:
            out.append(Miss("return address", ra, truth.return_address))
        for number, value in sorted(truth.saved.items()):
            if number in caller and caller[number] != value:
                out.append(Miss(arch.name_of(number), caller[number], value))
        return out

    def _unknown(self, source, pc, reason):
        self.tallies[source].note(pc, Verdict.UNKNOWN)
        self.tallies[source].reasons.setdefault(pc, reason)

    def _record(self, wrong: WrongStep):
        key = (wrong.source, wrong.address)
        if key in self._wrong_seen:
            return
        self._wrong_seen.add(key)
        wrong.place = self.place(wrong.address)
        wrong.instruction = self._instruction(wrong.address)
        self.wrong.append(wrong)

    def _insn(self, address):
        try:
            return self.decode(address) if self.decode else None
        except (MemoryReadError, ValueError):
            return None

    def _instruction(self, address):
        insn = self._insn(address)
        return insn.text if insn is not None else ""

    def is_call(self, address) -> Optional[bool]:
        """Is the instruction at address a call? None when it cannot be decoded."""
        insn = self._insn(address)
        return None if insn is None else insn.flow == Flow.CALL

    def place(self, address: int) -> str:
        """+0x4 inside the function validated, name+0x4 elsewhere (a tail-called function), else hex."""
        if self.function_end is not None and self.truth.entry <= address < self.function_end:
            return "+0x%x" % (address - self.truth.entry)
        found = self._symbol(address)
        if found is not None and found[1] == self.truth.entry:
            return "+0x%x" % (address - self.truth.entry)
        if found is None:
            return "0x%x" % address
        return "%s+0x%x" % (found[0], address - found[1])

    def _symbol(self, address):
        try:
            return self.symbol(address) if self.symbol else None
        except Exception:         # symbols only name places
            return None

    # -- the report --------------------------------------------------------------------
    def summary_line(self, source: str) -> str:
        """`cfi: 12/12 instructions right` or `sframe: 10/12 instructions right, wrong at +0x4, +0x5`."""
        tally = self.tallies[source]
        checked = len(tally.verdicts)
        if not checked:
            return "%s: no row covers any instruction stepped" % source
        wrong = tally.addresses(Verdict.WRONG)
        unknown = tally.addresses(Verdict.UNKNOWN)
        line = "%s: %d/%d instructions right" % (source, len(tally.addresses(Verdict.RIGHT)), checked)
        if wrong:
            shown = ", ".join(self.place(a) for a in wrong[:SHOWN_WRONG])
            line += ", wrong at %s%s" % (shown, ", ..." if len(wrong) > SHOWN_WRONG else "")
        if unknown:
            line += ", %d unknown" % len(unknown)
        uncovered = len(tally.uncovered - set(tally.verdicts))
        if uncovered:
            line += " (%d not covered)" % uncovered
        apart = len(tally.not_judged - set(tally.verdicts))
        if apart:
            line += " (%d not judged: it describes the body, exact at calls)" % apart
        return line

    def report(self, function: str, ending: Ending, steps: int, detail: str = "",
               ran_to_entry: bool = False, stopped_at: str = "") -> tuple:
        """(json object, text)."""
        ended = ENDING_TEXT[ending] % {"steps": steps, "detail": detail}
        state = self.inferior_note(ending, ran_to_entry, stopped_at)
        data = {"function": function, "entry": self.truth.entry, "cfa": self.truth.cfa,
                "return_address": self.truth.return_address, "steps": steps,
                "instructions": len(self.path), "path": list(self.path), "ending": ending.value, "ending_detail": ended,
                "complete": ending == Ending.RETURNED, "inferior": state,
                "sources": {s: self.tallies[s].to_json() for s in self.sources},
                "wrong": [w.to_json() for w in self.wrong]}
        hexa = "0x%%0%dx" % (2 * self.arch.address_size)
        lines = ["validate %s at %s: %d steps, %d instructions; %s." % (
            function, hexa % self.truth.entry, steps, len(self.path), ended),
            "truth at entry: CFA = %s, return address = %s" % (hexa % self.truth.cfa,
                                                                hexa % self.truth.return_address)]
        for wrong in self.wrong:
            lines.append("WRONG %s at %s (%s) %s" % (wrong.source, hexa % wrong.address, wrong.place,
                                                     wrong.instruction))
            lines.append("    row: %s" % (wrong.row or "none"))
            if wrong.reason:
                lines.append("    %s" % wrong.reason)
            for miss in wrong.misses:
                predicted = "none" if miss.predicted is None else hexa % miss.predicted
                lines.append("    %s: predicted %s, true %s" % (miss.item, predicted, hexa % miss.true))
        covering = [s for s in self.sources if self.tallies[s].verdicts]
        lines.extend(self.summary_line(s) for s in covering)
        idle = [s for s in self.sources if s not in covering]
        if idle:
            lines.append("no row of %s covers any instruction stepped" % ", ".join(idle))
        lines.append(state)
        return data, "\n".join(lines)

    @staticmethod
    def inferior_note(ending: Ending, ran_to_entry: bool, stopped_at: str) -> str:
        """What happened to the program: validate runs it, and says so."""
        before = "The program ran to the function's entry (a temporary breakpoint) and " if ran_to_entry \
            else "The program "
        if ending == Ending.RETURNED:
            return before + "ran the function to its return: it is now stopped at %s." % stopped_at
        if ending == Ending.EXITED:
            return before + "ran until it exited."
        return before + "ran part of the function: it is now stopped at %s." % stopped_at

