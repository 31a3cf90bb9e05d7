"""A table row in the form the analysis holds what it says: most rows at most instructions are right,
and are decided with a few lookups (plugin.validate.code.check_function); the others by
plugin.validate.code.quick_verdict, which says why.
"""
from __future__ import annotations

from typing import Optional

from plugin.analysis.state import CFA, Kind, State
from plugin.model.rules import CfaKind, RuleKind

# Read for every row of every function: globals, not attributes of the enums (45 ns each)
_REGISTER, _UNDEFINED, _SAME, _OFFSET = CfaKind.REGISTER, RuleKind.UNDEFINED, RuleKind.SAME, RuleKind.OFFSET
_CALLER, _STACK = Kind.CALLER, Kind.STACK


def row_plan(row, facts, registers) -> Optional[tuple]:
    """What a row says in the form the analysis holds it, for is_right: (CFA register, the value it
    must hold, ((register, the caller's value), ...) kept in registers, ((slot, the caller's value),
    ...) saved in slots). None for rows only quick_verdict judges (expressions, outermost rows)."""
    ra = row.registers.get(facts.RA)
    cfa = row.cfa
    if cfa.kind != _REGISTER or cfa.deref or ra is not None and ra.kind == _UNDEFINED:
        return None
    kept, saved = [], []
    for number in registers:
        rule = row.registers.get(number)
        wanted = (_CALLER, number)
        if rule is None or rule.kind == _SAME:
            if number == facts.RA and facts.RA_REGISTER is None:
                return None
            kept.append((number, wanted))
        elif rule.kind == _OFFSET:
            saved.append(((CFA, rule.offset), wanted))
        else:
            return None
    return cfa.register, (_STACK, CFA, -cfa.offset), tuple(kept), tuple(saved)


def is_right(plan, state: State) -> bool:
    """Does the state show every rule of the row right (row_plan)? False: quick_verdict decides."""
    regs = state.regs
    if regs.get(plan[0]) != plan[1]:
        return False
    for number, wanted in plan[2]:
        if regs.get(number) != wanted:
            return False
    mem = state.mem
    for slot, wanted in plan[3]:
        if mem.get(slot) != wanted:
            return False
    return True
