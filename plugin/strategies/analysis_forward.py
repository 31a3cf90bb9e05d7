"""The `analysis` source where the function's start is unknown: the code read forward from the pc.

plugin.analysis.forward follows every path from the frame's pc (for a
caller frame, its return address: the state after the call it made) to its
returns; when all agree, their row is applied like the backward analysis'
row. The evidence names the returns and the instructions that set the CFA
and each restored register, and says the start was unknown.
"""
from __future__ import annotations

from typing import Optional, Tuple

from plugin import analysis as code_analysis
from plugin.analysis import forward
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.model.rules import RuleKind
from plugin.strategies import function_start
from plugin.strategies.row_step import step_with_row

SOURCE = "analysis"


# the entry's start_by when the code was read forward from the pc (the start unknown)
FORWARD = function_start.StartBy.FORWARD

def known_offsets(frame, facts) -> dict:
    """Callee-saved registers whose value (in this frame) is a stack address at or above sp: offset from sp."""
    sp = frame.registers.get(facts.SP)
    if sp is None:
        return {}
    out = {}
    for number in facts.CALLEE_SAVED:
        value = frame.registers.get(number)
        if value is not None and 0 <= value - sp < forward.MAX_KNOWN_OFFSET:
            out[number] = value - sp
    return out


def forward_step(frame, ctx, unknown_start: str) -> Tuple[Optional[Outcome], str]:
    """(the Outcome, "") when the code read forward from the frame's pc decides, else (None, why not)."""
    from plugin.strategies.analysis import _return_address_problem
    arch = ctx.arch
    facts = code_analysis.FACTS[arch.name]
    thumb = bool(function_start.thumb_state(frame, ctx))
    code = function_start.code_of(ctx, frame.pc, thumb)
    known = known_offsets(frame, facts)
    # the link register holds the return address only in the innermost frame (a caller's made a call)
    found = forward.analyse(facts, frame.pc, known, _swept(code, ctx, frame.pc) if thumb else code.decode_at,
                            code._is_noreturn, code._callee, tail_call=lambda insn: _to_plt(insn, ctx),
                            link=frame.exact_pc and facts.RA_REGISTER is not None)
    if found.row is None:
        return None, found.why
    outcome = step_with_row(found.row, frame, ctx, _evidence(frame, ctx, found, known, facts, unknown_start))
    if outcome.status != AttemptStatus.RECOVERED:
        return None, "the row of the paths does not apply: %s" % outcome.reason
    problem = _return_address_problem(outcome, ctx)
    if problem:
        return Outcome.failed(SOURCE, problem, FailureKind.NOT_AFTER_CALL, evidence=outcome.evidence), ""
    return outcome, ""


def _to_plt(insn, ctx) -> bool:
    """A direct jump to a PLT stub: a tail call (the stub jumps on to another function)."""
    from plugin.strategies.scan import _in_plt
    return insn.target is not None and _in_plt(insn.target, ctx)


SWEEP = 256                     # bytes decoded in one linear sweep from each address a path reaches first


def _swept(code, ctx, pc):
    """decode_at that first decodes a short linear sweep from an address not decoded yet: capstone
    knows a Thumb IT block's conditions only when it decodes the `it` and what follows it in one
    sweep (one instruction at a time, `popeq {r4, pc}` reads as an unconditional `pop`). A path
    enters code at a branch target or the pc, never inside an IT block."""
    module = ctx.modules.find(pc)
    limit = module.segment_end(pc) if module is not None else None

    def decode_at(address):
        if address not in code._decoded:
            end = address + SWEEP if limit is None else min(address + SWEEP, limit)
            code.decode_range(address, max(end, address + 4))
        return code.decode_at(address)
    return decode_at


def _evidence(frame, ctx, found, known, facts, unknown_start) -> StepEvidence:
    arch = ctx.arch
    module = ctx.modules.find(frame.pc)
    evidence = StepEvidence(source=SOURCE, found_by="instruction analysis forward from the pc",
                            lookup_pc=frame.pc, module=module.name if module else None,
                            section="code", section_address=frame.pc,
                            # no start is known: the frame's pc stands in for it (GDB's frame id);
                            # "forward" is no StartBy found from the pc alone, so no plan replays the row
                            entry={"start": frame.pc, "start_by": FORWARD, "instructions": found.instructions,
                                   "returns": [insn.address for insn in found.returns]})
    evidence.notes.append("%s: the code was read forward from 0x%x, every path to its return (%d instructions)"
                          % (unknown_start, frame.pc, found.instructions))
    evidence.notes.append("every path returns at %s with the same frame" % ", ".join(
        "0x%x `%s`" % (insn.address, insn.text) for insn in found.returns))
    for number, offset in sorted(known.items()):
        evidence.notes.append("%s=%s%+d at 0x%x (the frame's registers)" % (
            arch.name_of(number), arch.name_of(facts.SP), offset, frame.pc))
    row = found.row
    cfa_insn = found.setters.get("cfa")
    evidence.notes.append("CFA=%s: %s" % (row.cfa.text(arch), "the stack pointer last moved by 0x%x `%s`"
                                          % (cfa_insn.address, cfa_insn.text) if cfa_insn
                                          else "the stack pointer does not move before the return"))
    for number, rule in sorted(row.registers.items()):
        insn = found.setters.get(number)
        if number == facts.RA and rule.kind == RuleKind.SAME:
            how = "the link register at the pc, unchanged to the return: the return address"
        elif number == facts.RA:
            how = "the word the return pops" if facts.RA_REGISTER is None else \
                "the word on the stack at the pc the return loads: the return address"
        elif rule.kind == RuleKind.UNDEFINED:
            how = "changed on the way to the return, not restored: unknown in the caller"
        elif insn is not None:
            how = "restored by 0x%x `%s`" % (insn.address, insn.text)
        else:
            how = "unchanged from the pc to the return"
        evidence.notes.append("%s=%s: %s" % (arch.name_of(number), rule.text(arch), how))
    return evidence
