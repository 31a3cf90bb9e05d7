"""A State turned into the unwind row the `analysis` source applies, and the instructions behind it.

`row_from_state` gives CFA = sp or fp + offset (or the slot a register
points at, for a realigned frame), where the return address and each
callee-saved register of the caller are (unchanged, or saved at CFA +
offset), and says why not when the state cannot tell: no register holds a
known CFA offset, or the return address has no known place. A callee-saved
register the function changed without saving it anywhere the analysis
tracks is `undefined`: the caller's value is unknown, not guessed.

`setters` finds, for each rule of the row, the instruction that set it:
the last one on the way from the function's start to pc after which the
fact held (e.g. `sub rsp, 0x28` for `CFA=rsp+48`, `push rbx` for
`rbx=[CFA-16]`), for the evidence.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from plugin.analysis.flow import FunctionAnalysis, apply
from plugin.analysis.rows import cfa_of, locations
from plugin.analysis.state import CFA, State
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind


def tracked(facts) -> Tuple[int, ...]:
    """The registers a row speaks for: callee-saved ones and the return address."""
    return tuple(sorted(set(facts.CALLEE_SAVED) | {facts.RA}))


def row_from_state(state: State, facts, arch, address: int) -> Tuple[Optional[Row], str]:
    """(the row, "") or (None, why the analysis cannot decide)."""
    found = cfa_of(state, facts)
    if found is None:
        sp = state.reg(facts.SP)
        why = sp[1] if sp[0].value == "unknown" else "no register holds a known offset from the CFA"
        return None, "the CFA is unknown here: %s" % why
    number, offset, deref = found
    registers = {}
    for register in tracked(facts):
        held, slots = locations(state, register)
        on_frame = sorted(k for base, k in slots if base == CFA)
        if held:
            if register == facts.RA:        # unchanged callee-saved registers need no rule
                registers[register] = Rule(RuleKind.SAME)
        elif on_frame:
            registers[register] = Rule(RuleKind.OFFSET, offset=on_frame[0])
        elif register == facts.RA:
            return None, "the return address is neither in %s nor saved in this frame" % (
                arch.name_of(facts.RA) if facts.RA_REGISTER is not None else "a tracked slot")
        else:
            registers[register] = Rule(RuleKind.UNDEFINED)
    cfa = CfaRule(CfaKind.REGISTER, register=number, offset=offset, deref=deref)
    return Row(address=address, cfa=cfa, registers=registers, ra_signed=arch.pointer_auth), ""


def _facts_of(state: State, row: Row):
    """What each part of the row rests on in a state: the CFA register's value; for a
    register saved at CFA+k whether that slot holds it, else whether it is unchanged."""
    out = {"cfa": state.reg(row.cfa.register)}
    for register, rule in row.registers.items():
        held, slots = locations(state, register)
        out[register] = (CFA, rule.offset) in slots if rule.kind == RuleKind.OFFSET else held
    return out


def setters(result: FunctionAnalysis, pc: int, row: Row, facts) -> Dict[object, object]:
    """"cfa" or register number -> the Insn after which that part of the row last came to hold, up to pc."""
    target = result.states.get(pc)
    if target is None or row.cfa.register is None:
        return {}
    wanted = _facts_of(target, row)
    found = {}
    for address in sorted(a for a in result.states if result.start <= a < pc):
        insn = result.insns.get(address)
        if insn is None:
            continue
        before = _facts_of(result.states[address], row)
        after = _facts_of(apply(insn, result.states[address], facts.SP), row)
        for key, value in wanted.items():
            if after[key] == value and before[key] != value:
                found[key] = insn
    return found
