"""Unwind tables checked against the code: the instruction analysis beside each table's rows.

At every instruction the analysis reached, each table's row in force is
judged by meaning, item by item: the CFA (register + offset, a dereference,
or a simple DWARF expression), the return address, and (for CFI) every
callee-saved register. An item is WRONG only when the analysis is sure:
the CFA rule names a register whose offset from the CFA is known and
different, or a register holding the caller's value (restored, or never
changed here: no base for this frame's CFA); a saved-register rule names a slot known to hold something
else, or a slot this function never wrote while the value is known to be
elsewhere; "same value" where the register was overwritten and the
function saved the caller's value. Everything the analysis cannot decide
is UNKNOWN, never wrong. Rows reached only by assuming an unresolved
indirect jump's frame are never reported wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List

from plugin.analysis import rows as arows
from plugin.errors import DecodeError
from plugin.formats import cfi
from plugin.analysis.state import CFA, Kind, State
from plugin.model.rules import CfaKind, RuleKind
from plugin.validate.row_plans import is_right, row_plan


class Verdict(str, Enum):
    RIGHT = "right"
    WRONG = "wrong"
    UNKNOWN = "unknown"


@dataclass
class Finding:
    """One item of one row judged at one instruction."""
    item: str                    # "cfa", or a register name
    verdict: Verdict
    table: str                   # what the row says
    analysis: str                # what the code says
    detail: str = ""


@dataclass
class Disagreement:
    address: int
    function: str
    source: str
    instruction: str
    row: str                     # the table's row in force, as text
    analysis: str                # the analysis row, as text
    findings: List[Finding] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"address": self.address, "function": self.function, "source": self.source,
                "instruction": self.instruction, "row": self.row, "analysis": self.analysis,
                "items": [{"item": f.item, "table": f.table, "analysis": f.analysis, "detail": f.detail}
                          for f in self.findings]}


@dataclass
class SourceSummary:
    checked: int = 0             # instructions with a row and an analysis state
    right: int = 0
    wrong: int = 0
    unknown: int = 0             # some item could not be decided (and none is wrong)
    uncovered: int = 0           # analysed instructions no row of this source covers

    def to_json(self) -> dict:
        return dict(self.__dict__)


def judge_cfa(row, state: State, facts, arch, explain: bool = True, pc: int = None) -> Finding:
    cfa = row.cfa
    if cfa.kind == CfaKind.EXPRESSION:
        value = arows.symbolic(cfa.expression, state, pc=pc, pc_register=arch.pc)
    else:
        base = state.reg(cfa.register)
        value = arows.plus(base, cfa.offset)
        if cfa.deref:
            value = state.slot(value, state.word)
    if cfa.kind != CfaKind.EXPRESSION and base[0] == Kind.CALLER and cfa.register != arch.sp:
        verdict = Verdict.WRONG
        detail = ("%s holds the caller's value here (restored, or never changed in this frame): "
                  "a CFA computed from it is not this frame's" % arch.name_of(cfa.register))
    elif value is None or value[0] != Kind.STACK or value[1] != CFA:
        verdict, detail = Verdict.UNKNOWN, _why(value)
    elif value[2] == 0:
        verdict, detail = Verdict.RIGHT, ""
    else:
        verdict, detail = Verdict.WRONG, "the row's CFA is %+d bytes from the real one" % value[2]
    if not explain:
        return Finding("cfa", verdict, "", "", detail)
    return Finding("cfa", verdict, cfa.text(arch), arows.cfa_text(state, facts, arch), detail)


def _why(value) -> str:
    if value is None:
        return "the expression uses operations the analysis does not follow"
    if value[0] == Kind.UNKNOWN:
        return value[1]
    if value[0] == Kind.STACK:
        return "realigned stack: its distance from the CFA is not known"
    return "the row's CFA register holds no stack address the analysis knows"


def saved_slots(state: State) -> dict:
    """caller value -> [(base, offset)] of the slots holding it: built once per state."""
    out = {}
    for key, value in state.mem.items():
        if value[0] == Kind.CALLER:
            out.setdefault(value, []).append(key)
    return out


def judge_register(number: int, rule, state: State, facts, arch, slots_of=None,
                   explain: bool = True) -> Finding:
    """rule None means the row gives no rule: the register keeps its value."""
    verdict, detail = _judge_register(number, rule, state, facts, arch,
                                      saved_slots(state) if slots_of is None else slots_of)
    name = arch.name_of(number)
    if not explain:
        return Finding(name, verdict, "", "", detail)
    said = "same (no rule)" if rule is None else rule.text(arch)
    return Finding(name, verdict, said, arows.register_text(state, number), detail)


def _judge_register(number, rule, state, facts, arch, slots_of):
    """slots_of: saved_slots(state), or a callable giving it (built only when a rule needs it)."""
    wanted = arows.caller(number)
    held = state.regs.get(number) == wanted

    def slots():
        found = slots_of() if callable(slots_of) else slots_of
        return found.get(wanted, ())

    def known():
        """Where the caller's value is known to be: its own register, a slot, or a copy in another register."""
        return held or bool(slots()) or any(value == wanted for value in state.regs.values())
    kind = RuleKind.SAME if rule is None else rule.kind
    if kind == RuleKind.SAME:
        if number == facts.RA and facts.RA_REGISTER is None:
            return Verdict.UNKNOWN, "the return address has no register"
        if held:
            return Verdict.RIGHT, ""
        if state.reg(number)[0] != Kind.UNKNOWN and slots():
            return Verdict.WRONG, "the register was overwritten; the caller's value is saved on the stack"
        return Verdict.UNKNOWN, "the caller's value is not tracked here"
    if kind == RuleKind.OFFSET or kind == RuleKind.EXPRESSION:
        if kind == RuleKind.OFFSET:
            content = state.mem.get((CFA, rule.offset))
            if content == wanted:
                return Verdict.RIGHT, ""            # the common case, decided without building the slot
            where = arows.stack(CFA, rule.offset)
        else:
            where = arows.symbolic(rule.expression, state, initial=arows.CFA_ZERO)
        if where is None or where[0] != Kind.STACK:
            return Verdict.UNKNOWN, _why(where)
        content = state.mem.get((where[1], where[2]))
        if content == wanted:
            return Verdict.RIGHT, ""
        if content is None:
            aligned = where[1] != CFA or any(key[0] != CFA for key in state.mem)
            if where[2] < 0 and not aligned and known():
                return Verdict.WRONG, "nothing this function stored at that slot is the caller's value"
            return Verdict.UNKNOWN, "slot not written by this function"
        if content[0] == Kind.UNKNOWN:
            return Verdict.UNKNOWN, content[1]
        return Verdict.WRONG, "that slot holds %s" % _value_text(content, arch)
    if kind == RuleKind.REGISTER:
        current = state.reg(rule.register)
        if current == wanted:
            return Verdict.RIGHT, ""
        if current[0] != Kind.UNKNOWN and known():
            return Verdict.WRONG, "%s holds %s" % (arch.name_of(rule.register), _value_text(current, arch))
        return Verdict.UNKNOWN, "not tracked"
    if kind == RuleKind.UNDEFINED:
        return Verdict.UNKNOWN, "the row says the value is lost (outermost frame)"
    return Verdict.UNKNOWN, "%s rules are not judged" % kind


def _value_text(value, arch) -> str:
    if value[0] == Kind.CALLER:
        return "the caller's %s" % arch.name_of(value[1])
    if value[0] == Kind.STACK:
        return "the stack address %s%+d" % ("CFA" if value[1] == CFA else "aligned", value[2])
    return "a value computed by this function"


def judge_row(row, state: State, facts, arch, registers, explain: bool = True,
              pc: int = None) -> List[Finding]:
    """Findings for the CFA and each of `registers` (DWARF numbers), at pc."""
    ra = row.registers.get(facts.RA)
    if ra is not None and ra.kind == RuleKind.UNDEFINED:
        # An outermost frame (_start, thread entry): it has no caller, so its CFA means nothing.
        return [Finding("cfa", Verdict.UNKNOWN, "", "", "the row marks an outermost frame")]
    slots_of = saved_slots(state)
    findings = [judge_cfa(row, state, facts, arch, explain, pc)]
    if findings[0].verdict == Verdict.UNKNOWN:
        # A row whose CFA the code does not place may describe another frame
        # on purpose (longjmp, context switches): its rules are not judged.
        return findings
    for number in registers:
        findings.append(judge_register(number, row.registers.get(number), state, facts, arch,
                                       slots_of, explain))
    return findings


def quick_verdict(row, state: State, facts, arch, registers, pc) -> Verdict:
    """overall(judge_row(...)) without building findings: most rows are right."""
    ra = row.registers.get(facts.RA)
    if ra is not None and ra.kind == RuleKind.UNDEFINED:
        return Verdict.UNKNOWN
    cfa = judge_cfa(row, state, facts, arch, False, pc).verdict
    if cfa == Verdict.UNKNOWN:
        return cfa
    verdict = cfa
    slots = []
    regs = state.regs
    rules = row.registers

    def slots_of():
        if not slots:
            slots.append(saved_slots(state))
        return slots[0]
    mem = state.mem
    for number in registers:
        rule = rules.get(number)
        kind = RuleKind.SAME if rule is None else rule.kind
        if kind == RuleKind.SAME:
            if regs.get(number) == (Kind.CALLER, number):
                continue                          # the common case: unchanged and said so
        elif kind == RuleKind.OFFSET and mem.get((CFA, rule.offset)) == (Kind.CALLER, number):
            continue                              # and saved where the row says
        found, _ = _judge_register(number, rule, state, facts, arch, slots_of)
        if found == Verdict.WRONG:
            return found
        if found == Verdict.UNKNOWN:
            verdict = Verdict.UNKNOWN if verdict == Verdict.RIGHT else verdict
    return verdict


def overall(findings: List[Finding]) -> Verdict:
    verdicts = {f.verdict for f in findings}
    if Verdict.WRONG in verdicts:
        return Verdict.WRONG
    if Verdict.UNKNOWN in verdicts:
        return Verdict.UNKNOWN
    return Verdict.RIGHT


def checked_registers(source: str, facts) -> List[int]:
    """CFI: the return address and every callee-saved register; SFrame: return address and FP."""
    if source == "sframe":
        return [facts.RA, facts.FP]
    return [facts.RA] + [r for r in facts.CALLEE_SAVED if r != facts.RA]


@dataclass
class FunctionReport:
    start: int
    end: int
    name: str
    instructions: int = 0
    analysed: int = 0            # instructions with a state and a known CFA
    unknown: Dict[int, str] = field(default_factory=dict)   # address -> why the analysis has no row
    sources: Dict[str, SourceSummary] = field(default_factory=dict)
    disagreements: List[Disagreement] = field(default_factory=list)
    detail: list = field(default_factory=list)   # per instruction, when asked for
    continuation: bool = False   # entered by jumps from another function's frame (a .cold part)

    def to_json(self) -> dict:
        """The streamed `--json` record of this function (without the per-instruction detail)."""
        return {"start": self.start, "end": self.end, "name": self.name, "instructions": self.instructions,
                "analysed": self.analysed, "unknown": len(self.unknown),
                "sources": {k: v.to_json() for k, v in self.sources.items()},
                "disagreements": [d.to_json() for d in self.disagreements]}


def _evidence(result, address: int, line: dict) -> None:
    """What a jump table or a jump from another function's frame adds at one instruction (detail)."""
    if address in result.tables:
        table, entries, bounded, targets = result.tables[address]
        line["table"] = {"address": table, "entries": entries, "bounded": bounded,
                         "targets": len(targets)}
    if address in result.entered:
        line["entered_by"] = result.entered[address]


def check_function(analysis, start: int, end: int, name: str, tables: Dict[str, object], facts, arch,
                   keep_detail: bool = False) -> FunctionReport:
    """tables: source -> callable(pc) giving the Row in force at pc, or None."""
    result = analysis.function(start, end)
    report = FunctionReport(start, end, name)
    registers_of = {source: checked_registers(source, facts) for source in tables}
    judged: Dict[str, tuple] = {}       # source -> (row, state, verdict, plan) last judged
    # (source, id(row)) -> (row, row_plan, its verdict is the same at every pc): rows repeat over their range
    plans: Dict[tuple, tuple] = {}
    insns, states, unknown, summaries = result.insns, result.states, report.unknown, report.sources
    checking = None                     # [(source, row_at, its summary)], from the first instruction with a state
    right, wrong = Verdict.RIGHT, Verdict.WRONG
    cfa_state, cfa, counted, analysed = None, None, 0, 0    # the state whose CFA was found last, that CFA
    address = start
    while address < end:
        insn = insns.get(address) or analysis.decode_at(address)
        if insn is None:
            unknown[address] = "cannot decode an instruction here"
            break
        state = states.get(address)
        line = {"address": address, "instruction": insn.text, "sources": {}} if keep_detail else None
        if state is None:
            reason = result.gave_up.get(address)
            if reason is None:
                if insn.text.startswith(("nop", "int3", "xchg ax, ax", "data16")) or insn.text == "hlt" \
                        or facts.is_padding(insn.text):
                    address = insn.end          # padding between blocks: not an instruction of any path
                    continue
                reason = "not reached from the function's entry"
            counted += 1
            unknown[address] = reason
            if keep_detail:
                line["analysis"] = "unknown (%s)" % reason
        else:
            counted += 1
            if state is not cfa_state:          # states are shared by instructions that change nothing
                cfa_state, cfa = state, arows.cfa_of(state, facts)
            if cfa is None:
                unknown[address] = arows.cfa_text(state, facts, arch)
            else:
                analysed += 1
            if keep_detail:
                line["analysis"] = arows.text(state, facts, arch)
            if checking is None:
                checking = [(source, row_at, summaries.setdefault(source, SourceSummary()))
                            for source, row_at in tables.items()]
            for source, row_at, summary in checking:
                row = row_at(address)
                if row is None:
                    summary.uncovered += 1
                    continue
                last = judged.get(source)
                if last is not None and last[0] is row and last[1] is state:
                    verdict = last[2]               # the same row and the same state as the instruction before
                else:
                    if last is not None and last[0] is row:
                        plan = last[3]              # the same row: its plan
                    else:
                        plan = plans.get((source, id(row)))
                        if plan is None or plan[0] is not row:
                            plan = plans[(source, id(row))] = (row, row_plan(row, facts, registers_of[source]),
                                                               row.cfa.kind != CfaKind.EXPRESSION)
                    if plan[1] is not None and is_right(plan[1], state):
                        verdict = right
                    else:
                        verdict = quick_verdict(row, state, facts, arch, registers_of[source], address)
                    if plan[2]:                     # an expression's verdict may depend on the pc
                        judged[source] = (row, state, verdict, plan)
                summary.checked += 1
                if verdict is right:
                    summary.right += 1
                    if keep_detail:
                        line["sources"][source] = {"verdict": verdict.value, "row": row.text(arch)}
                    continue
                if verdict == wrong and address in result.assumed:
                    verdict = Verdict.UNKNOWN       # reached only through an unresolved indirect jump
                setattr(summary, verdict.value, getattr(summary, verdict.value) + 1)
                if keep_detail:
                    line["sources"][source] = {"verdict": verdict.value, "row": row.text(arch)}
                if verdict == wrong:
                    findings = judge_row(row, state, facts, arch, registers_of[source], pc=address)
                    report.disagreements.append(Disagreement(
                        address, name, source, insn.text, row.text(arch), arows.text(state, facts, arch),
                        [f for f in findings if f.verdict == wrong]))
        if keep_detail:
            _evidence(result, address, line)
            report.detail.append(line)
        address = insn.end
    report.instructions, report.analysed = counted, analysed
    return report


def cfi_args_size(fdes, arch):
    """(function start, call address) -> the DW_CFA_GNU_args_size of the CFI row in force at the call:
    the argument bytes still pushed there, which the unwinder adds to the stack pointer when it
    resumes a landing pad (the analysis enters the function's pads with it). 0 without an FDE."""
    cache = {}

    def args_size(start: int, pc: int) -> int:
        if start not in cache:
            cache.clear()               # pads are entered one function at a time
            try:
                fde = fdes.get(start)
                cache[start] = [(r.address, r.end, r.args_size) for r in cfi.execute(fde, arch)
                                if r.args_size] if fde is not None else []
            except DecodeError:
                cache[start] = []
        return next((size for low, high, size in cache[start] if low <= pc < high), 0)
    return args_size
