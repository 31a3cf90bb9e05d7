"""The `analysis` source: code without tables, unwound from its own instructions.

The instruction analysis (plugin.analysis, shared with `unwind validate`)
follows every path from the function's start and knows, before each
instruction, the stack pointer's offset from the CFA, which register holds
the frame pointer, and where the caller's callee-saved registers and return
address are. That state at the frame's pc becomes a row (plugin.analysis.
unwind_row): CFA = sp or fp + offset, return address and saved registers
at CFA + offset; where the analysis cannot decide (paths disagree, the
stack pointer moved by an unknown amount, the pc is not reached) the source
answers `undecided` and the next source is tried.

The function's start is found by its symbol, a neighbouring function's
table entry, the call that reached it, or a prologue before it
(plugin.strategies.function_start); the evidence says which, and why.
A caller frame is read at the state before the call it made (its return
address follows that call), the innermost or an interrupted frame at its
exact pc. An innermost pc that is not code at all (a call through a null
or stale function pointer) is a function entered by that call: only the
return address the call left is known: the analysis leaves that frame to
the frame-pointer source's edge rule (a call to a non-code address). The
child side of clone/clone3 is outermost, as for the other fallbacks.

On 32-bit Arm the frame's CPSR.T says whether its code is Arm or Thumb
(one CodeAnalysis per instruction set), landing pads come from the LSDA its
.ARM.extab entry names, and where the .ARM.exidx entry says EXIDX_CANTUNWIND
(the table marks the function as not unwindable by exceptions) or no entry
covers the pc, the evidence says so: the code decided.

Like every fallback it answers only where no table covers the frame. It is
no guess (settings.SourceKind.PROOF): GDB's `bt` takes its frames by default
where GDB's own unwinders give another caller (gdb_unwinder/claim.py).
"""
from __future__ import annotations

from typing import Optional

from plugin import analysis as code_analysis
from plugin.analysis import unwind_row
from plugin.analysis.ops import Flow
from plugin.analysis.state import OTHER
from plugin.arch import reader
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats.exidx import EntryKind
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.model.rules import RuleKind
from plugin.strategies import function_start, sigframe
from plugin.strategies.frame_pointer import stack_edge
from plugin.strategies.function_start import Start, StartBy
from plugin.strategies.row_step import step_with_row

SOURCE = "analysis"
WINDOW_PAST_PC = 4096                # bytes of a function after the pc the analysis follows


def step(frame, ctx) -> Outcome:
    arch = ctx.arch
    if not code_analysis.supported(arch):
        return Outcome.not_applicable(SOURCE, "no instruction analysis for %s" % arch.name, FailureKind.NOT_SUPPORTED)
    edge = stack_edge(frame, ctx, SOURCE)
    if edge is not None:
        return edge
    try:
        import capstone  # noqa: F401  (the analysis decodes with it)
    except ImportError:
        return Outcome.not_applicable(SOURCE, "capstone is not installed", FailureKind.NOT_SUPPORTED)
    pc = ctx.lookup_pc(frame)
    if not ctx.is_code(pc):
        return Outcome.not_applicable(SOURCE, "0x%x is not code" % pc, FailureKind.NO_ENTRY)
    thumb = function_start.thumb_state(frame, ctx)
    if thumb is None:
        return Outcome.not_applicable(SOURCE, "the instruction set at 0x%x is unknown: no CPSR for the frame"
                                      % pc, FailureKind.NOT_SUPPORTED)
    reasons, covered = [], False
    for start in function_start.starts(frame, ctx, pc, thumb):
        outcome, why = _from_start(frame, ctx, start, thumb)
        if outcome is not None:
            return outcome
        reasons.append(why)
        covered = covered or not _misses_pc(why)
    if not reasons:
        unknown_start = ("the start of the function at 0x%x is unknown: no symbol, no neighbouring table "
                         "entry, no direct call on the stack reaches it, no prologue before it" % pc)
    else:
        unknown_start = "; ".join(reasons)
    if arch.name in ("i386", "x86_64", "arm") and not covered:
        # No start found reaches the pc (or none was found): its start is unknown, the code after it is not
        from plugin.strategies.analysis_forward import forward_step
        outcome, why = forward_step(frame, ctx, unknown_start if not reasons else
                                    "no start found reaches 0x%x (%s)" % (pc, unknown_start))
        if outcome is not None:
            return outcome
        unknown_start += "; read forward from 0x%x instead: %s" % (frame.pc, why)
    if not reasons:
        return Outcome.not_applicable(SOURCE, unknown_start, FailureKind.NO_ENTRY)
    return Outcome.failed(SOURCE, unknown_start, FailureKind.UNDECIDED)


def _end(ctx, start, pc) -> int:
    """How far the analysis follows the function: a window past pc, within pc's code mapping."""
    end = pc + WINDOW_PAST_PC
    module = ctx.modules.find(pc)
    limit = module.segment_end(pc) if module is not None else None
    if limit is None:
        mapping = ctx.mapping_at(pc) if ctx.knows_mappings() else None
        limit = mapping.end if mapping is not None else None
    return max(pc + 1, min(end, limit)) if limit else end


# -- the row at the pc --------------------------------------------------------------

def _from_start(frame, ctx, start: Start, thumb=False):
    """(Outcome, "") when the analysis from start decides the frame, else (None, why not)."""
    arch = ctx.arch
    facts = code_analysis.FACTS[arch.name]
    pc = ctx.lookup_pc(frame)
    code = function_start.code_of(ctx, start.address, thumb)
    if arch.name == "arm" and start.address not in code.lsda:
        code.lsda[start.address] = _exidx_lsda(ctx, start.address)
    result = code.function_covering(start.address, pc, _end(ctx, start.address, pc))
    where = "from 0x%x (%s)" % (start.address, start.by.value)
    address = frame.pc if frame.exact_pc else _call_before(result, frame.pc)
    if address is None:
        return None, _Missed("%s: no call instruction of the function ends at 0x%x" % (where, frame.pc))
    state = result.states.get(address)
    if state is None:
        if address not in result.gave_up:
            return None, _Missed("%s: 0x%x is not reached from the start" % (where, address))
        return None, "%s: %s" % (where, result.gave_up[address])
    if not frame.exact_pc and facts.RA_REGISTER is not None:
        # The call itself wrote the link register: the caller's value is only where it was saved.
        state = state.copy()
        state.regs[facts.RA_REGISTER] = OTHER
    row, why = unwind_row.row_from_state(state, facts, arch, address)
    if row is None:
        return None, "%s: %s" % (where, why)
    evidence = _evidence(frame, ctx, start, result, address, row, facts)
    outcome = step_with_row(row, frame, ctx, evidence)
    if outcome.status != AttemptStatus.RECOVERED:
        return outcome, ""
    if start.by == StartBy.CALL and not _return_address_where_found(outcome, row, start, arch):
        return None, ("%s: the row does not put the return address where the call's (0x%x) was found"
                      % (where, start.return_address))
    problem = _return_address_problem(outcome, ctx)
    if problem:
        return Outcome.failed(SOURCE, problem, FailureKind.NOT_AFTER_CALL, evidence=outcome.evidence), ""
    return outcome, ""


class _Missed(str):
    """Why a start does not decide, when its analysis does not reach the pc at all: the start is
    another function's, so the pc's own start stays unknown."""


def _misses_pc(why) -> bool:
    return isinstance(why, _Missed)


def _exidx_lsda(ctx, start) -> Optional[int]:
    """The LSDA the .ARM.extab entry of the function at start names (its landing pads), or None."""
    from plugin.strategies.exidx import ExidxTables
    module = ctx.modules.find(start)
    if module is None:
        return None
    try:
        tables = ExidxTables.of(module, ctx.target)
        table = tables.table()
        entry = table.find(start) if table is not None else None
        if entry is None or entry.function != start or entry.kind == EntryKind.CANTUNWIND:
            return None
        unwind, _ = tables.planned(entry, ctx.symbol)
    except (DecodeError, MemoryReadError):
        return None
    return unwind.lsda or None


def _call_before(result, return_address) -> Optional[int]:
    """The address of the call instruction the analysis reached that ends at return_address."""
    for address, insn in result.insns.items():
        if insn.end == return_address and insn.flow == Flow.CALL:
            return address
    return None


def _return_address_where_found(outcome, row, start, arch) -> bool:
    rule = row.registers.get(arch.ra)
    if start.slot is None:              # the link register held it
        return rule is not None and rule.kind == RuleKind.SAME
    return rule is not None and rule.kind == RuleKind.OFFSET and outcome.evidence.cfa + rule.offset == start.slot


def _return_address_problem(outcome, ctx) -> Optional[str]:
    ra = outcome.registers.get(ctx.arch.pc)
    if not ra or not ctx.is_code(ra):
        return None                     # the engine's checks judge these
    if not ctx.follows_call(ra):
        return "return address 0x%x does not follow a call instruction" % ra
    if ctx.arch.call_before(reader(ctx.read_memory), ra) is None:
        trampoline = sigframe.recognise(ctx, ra)
        outcome.evidence.notes.append("return address 0x%x is a signal trampoline (%s): the kernel planted "
                                      "it, no call precedes it" % (ra, trampoline.why))
    return None


def _evidence(frame, ctx, start, result, address, row, facts) -> StepEvidence:
    arch = ctx.arch
    module = ctx.modules.find(address)
    evidence = StepEvidence(source=SOURCE, found_by="instruction analysis from %s" % start.by.description,
                            lookup_pc=address, module=module.name if module else None,
                            section="code", section_address=start.address,
                            entry={"start": start.address, "function": start.name, "start_by": start.by,
                                   "instructions": len(result.states)})
    evidence.notes.append(start.why)
    ehabi = function_start.exidx_note(ctx, address)
    if ehabi:
        evidence.notes.append(ehabi)
    setters = unwind_row.setters(result, address, row, facts)
    cfa_insn = setters.get("cfa")
    evidence.notes.append("CFA=%s: %s" % (row.cfa.text(arch), "set by 0x%x `%s`" % (cfa_insn.address, cfa_insn.text)
                                          if cfa_insn else "as at the function's entry"))
    evidence.notes.extend(why for at, why in sorted(getattr(result, "notes", {}).items()) if at < address)
    for number, rule in sorted(row.registers.items()):
        insn = setters.get(number)
        if rule.kind == RuleKind.OFFSET:
            how = "saved by 0x%x `%s`" % (insn.address, insn.text) if insn else "where the call put it"
        elif rule.kind == RuleKind.UNDEFINED:
            how = "changed by 0x%x `%s`, not saved: unknown in the caller" % (insn.address, insn.text) \
                if insn else "changed and not saved: unknown in the caller"
        else:
            how = "unchanged since the entry"
        evidence.notes.append("%s=%s: %s" % (arch.name_of(number), rule.text(arch), how))
    return evidence

