"""A CIE's or FDE's instructions as text, one line per instruction."""
from __future__ import annotations

from plugin.arch import Arch
from plugin.formats.cfi.entries import CIE, FDE
from plugin.formats.cfi.instructions import (
    ADVANCES, CFA_DEF_CFA, CFA_DEF_CFA_EXPRESSION, CFA_DEF_CFA_OFFSET, CFA_DEF_CFA_OFFSET_SF,
    CFA_DEF_CFA_REGISTER, CFA_DEF_CFA_SF, CFA_GNU_ARGS_SIZE, CFA_GNU_WINDOW_SAVE, CFA_RESTORE,
    CFA_RESTORE_EXTENDED, CFA_SET_LOC, OPCODE_NAMES, program)
from plugin.model.rules import Rule, RuleKind


def describe(instructions_owner: CIE | FDE, arch: Arch) -> list[str]:
    """A CIE's or FDE's program as text, one line per instruction.

    e.g. "DW_CFA_def_cfa: rsp+8", "DW_CFA_offset: rip at cfa-8",
    "DW_CFA_advance_loc: 4 to 0x1134". Expressions are shown as hex bytes.
    """
    owner = instructions_owner
    is_fde = isinstance(owner, FDE)
    loc = owner.start if is_fde else None
    reg = arch.name_of
    lines = []
    for _, op, a, b in program(owner):
        name = OPCODE_NAMES[op]
        if op == CFA_GNU_WINDOW_SAVE and arch.name == "aarch64":
            name = "DW_CFA_AARCH64_negate_ra_state"
        if op in ADVANCES:
            if loc is None:
                lines.append("%s: %d" % (name, a))
            else:
                loc += a
                lines.append("%s: %d to 0x%x" % (name, a, loc))
        elif op == CFA_SET_LOC:
            loc = a
            lines.append("%s: 0x%x" % (name, a))
        elif op in (CFA_DEF_CFA, CFA_DEF_CFA_SF):
            lines.append("%s: %s%+d" % (name, reg(b.register), b.offset))
        elif op == CFA_DEF_CFA_EXPRESSION:
            lines.append("%s: expr %s" % (name, b.expression.hex()))
        elif op == CFA_DEF_CFA_REGISTER:
            lines.append("%s: %s" % (name, reg(a)))
        elif op in (CFA_DEF_CFA_OFFSET, CFA_DEF_CFA_OFFSET_SF, CFA_GNU_ARGS_SIZE):
            lines.append("%s: %d" % (name, a))
        elif op in (CFA_RESTORE, CFA_RESTORE_EXTENDED):
            lines.append("%s: %s" % (name, reg(a)))
        elif isinstance(b, Rule):
            lines.append("%s: %s" % (name, _rule_text(reg(a), b, reg)))
        else:
            lines.append(name)
    return lines


def _rule_text(register, rule, reg):
    if rule.kind == RuleKind.OFFSET:
        return "%s at cfa%+d" % (register, rule.offset)
    if rule.kind == RuleKind.VAL_OFFSET:
        return "%s = cfa%+d" % (register, rule.offset)
    if rule.kind == RuleKind.REGISTER:
        return "%s in %s" % (register, reg(rule.register))
    if rule.kind == RuleKind.EXPRESSION:
        return "%s at [expr %s]" % (register, rule.expression.hex())
    if rule.kind == RuleKind.VAL_EXPRESSION:
        return "%s = expr %s" % (register, rule.expression.hex())
    return register                              # same_value, undefined: the name says it
