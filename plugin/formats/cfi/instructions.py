"""The CFA program: DW_CFA_* opcodes decoded into ready-to-run instructions.

A CIE's initial instructions and an FDE's instructions are decoded once per
entry (and cached on it) into (offset, opcode, a, b) tuples whose operands
are already factored: advances in bytes, offsets multiplied by the data
alignment, register rules as Rule objects. rows.py interprets them,
listing.py prints them. References: DWARF 5 section 6.4.2, GNU and vendor
extensions (DW_CFA_GNU_*, DW_CFA_MIPS_advance_loc8, AArch64's
negate_ra_state).
"""
from __future__ import annotations

from plugin.errors import DecodeError, DecodeKind
from plugin.formats.cfi.entries import CIE, FDE
from plugin.leb128 import LebError, LebProblem, read_sleb, read_uleb
from plugin.memory import LEB_KINDS, Cursor
from plugin.model.rules import CfaKind, CfaRule, Rule, RuleKind

# --- DW_CFA opcodes (DWARF 5 table 7.29, GNU and vendor extensions) ---------

CFA_NOP = 0x00
CFA_SET_LOC = 0x01
CFA_ADVANCE_LOC1 = 0x02
CFA_ADVANCE_LOC2 = 0x03
CFA_ADVANCE_LOC4 = 0x04
CFA_OFFSET_EXTENDED = 0x05
CFA_RESTORE_EXTENDED = 0x06
CFA_UNDEFINED = 0x07
CFA_SAME_VALUE = 0x08
CFA_REGISTER = 0x09
CFA_REMEMBER_STATE = 0x0A
CFA_RESTORE_STATE = 0x0B
CFA_DEF_CFA = 0x0C
CFA_DEF_CFA_REGISTER = 0x0D
CFA_DEF_CFA_OFFSET = 0x0E
CFA_DEF_CFA_EXPRESSION = 0x0F
CFA_EXPRESSION = 0x10
CFA_OFFSET_EXTENDED_SF = 0x11
CFA_DEF_CFA_SF = 0x12
CFA_DEF_CFA_OFFSET_SF = 0x13
CFA_VAL_OFFSET = 0x14
CFA_VAL_OFFSET_SF = 0x15
CFA_VAL_EXPRESSION = 0x16
CFA_MIPS_ADVANCE_LOC8 = 0x1D
CFA_AARCH64_NEGATE_RA_STATE_WITH_PC = 0x2C
CFA_GNU_WINDOW_SAVE = 0x2D            # DW_CFA_AARCH64_negate_ra_state on aarch64
CFA_GNU_ARGS_SIZE = 0x2E
CFA_GNU_NEGATIVE_OFFSET_EXTENDED = 0x2F
# The three "primary" opcodes carry an operand in their low 6 bits; the
# decoder reports them under these values.
CFA_ADVANCE_LOC = 0x40
CFA_OFFSET = 0x80
CFA_RESTORE = 0xC0

OPCODE_NAMES = {
    CFA_NOP: "DW_CFA_nop",
    CFA_SET_LOC: "DW_CFA_set_loc",
    CFA_ADVANCE_LOC1: "DW_CFA_advance_loc1",
    CFA_ADVANCE_LOC2: "DW_CFA_advance_loc2",
    CFA_ADVANCE_LOC4: "DW_CFA_advance_loc4",
    CFA_OFFSET_EXTENDED: "DW_CFA_offset_extended",
    CFA_RESTORE_EXTENDED: "DW_CFA_restore_extended",
    CFA_UNDEFINED: "DW_CFA_undefined",
    CFA_SAME_VALUE: "DW_CFA_same_value",
    CFA_REGISTER: "DW_CFA_register",
    CFA_REMEMBER_STATE: "DW_CFA_remember_state",
    CFA_RESTORE_STATE: "DW_CFA_restore_state",
    CFA_DEF_CFA: "DW_CFA_def_cfa",
    CFA_DEF_CFA_REGISTER: "DW_CFA_def_cfa_register",
    CFA_DEF_CFA_OFFSET: "DW_CFA_def_cfa_offset",
    CFA_DEF_CFA_EXPRESSION: "DW_CFA_def_cfa_expression",
    CFA_EXPRESSION: "DW_CFA_expression",
    CFA_OFFSET_EXTENDED_SF: "DW_CFA_offset_extended_sf",
    CFA_DEF_CFA_SF: "DW_CFA_def_cfa_sf",
    CFA_DEF_CFA_OFFSET_SF: "DW_CFA_def_cfa_offset_sf",
    CFA_VAL_OFFSET: "DW_CFA_val_offset",
    CFA_VAL_OFFSET_SF: "DW_CFA_val_offset_sf",
    CFA_VAL_EXPRESSION: "DW_CFA_val_expression",
    CFA_MIPS_ADVANCE_LOC8: "DW_CFA_MIPS_advance_loc8",
    CFA_AARCH64_NEGATE_RA_STATE_WITH_PC: "DW_CFA_AARCH64_negate_ra_state_with_pc",
    CFA_GNU_WINDOW_SAVE: "DW_CFA_GNU_window_save",
    CFA_GNU_ARGS_SIZE: "DW_CFA_GNU_args_size",
    CFA_GNU_NEGATIVE_OFFSET_EXTENDED: "DW_CFA_GNU_negative_offset_extended",
    CFA_ADVANCE_LOC: "DW_CFA_advance_loc",
    CFA_OFFSET: "DW_CFA_offset",
    CFA_RESTORE: "DW_CFA_restore",
}

ADVANCES = frozenset((CFA_ADVANCE_LOC, CFA_ADVANCE_LOC1, CFA_ADVANCE_LOC2,
                       CFA_ADVANCE_LOC4, CFA_MIPS_ADVANCE_LOC8))
_FIXED_ADVANCE_SIZES = {CFA_ADVANCE_LOC1: 1, CFA_ADVANCE_LOC2: 2,
                        CFA_ADVANCE_LOC4: 4, CFA_MIPS_ADVANCE_LOC8: 8}



_SAME_RULE = Rule(RuleKind.SAME)
_UNDEFINED_RULE = Rule(RuleKind.UNDEFINED)

# One decoded instruction: (offset in the entry's instructions, opcode, a, b).
Instruction = tuple


class _Malformed(Exception):
    """An operand could not be decoded; becomes a DecodeError at its opcode."""

    def __init__(self, cause, kind=DecodeKind.TRUNCATED):
        super().__init__(cause)
        self.cause = cause
        self.kind = kind


def _uleb(data, i):
    try:
        return read_uleb(data, i)
    except LebError as exc:
        raise _Malformed(_leb_cause(exc), LEB_KINDS[exc.kind]) from None


def _sleb(data, i):
    try:
        return read_sleb(data, i)
    except LebError as exc:
        raise _Malformed(_leb_cause(exc), LEB_KINDS[exc.kind]) from None


def _leb_cause(exc):
    if exc.kind == LebProblem.TRUNCATED:
        return "LEB128 operand runs past the end of the instructions"
    return exc.cause


def _block(data, i):
    length, i = _uleb(data, i)
    if i + length > len(data):
        raise _Malformed("expression of %d bytes runs past the end of the instructions" % length)
    return data[i:i + length], i + length


_OFFSET_RULES = {}


def _offset_rule(offset):
    """Rule(RuleKind.OFFSET, offset), shared: Rules are immutable and a few offsets
    (-8, -16, ...) make up nearly all of them."""
    rule = _OFFSET_RULES.get(offset)
    if rule is None:
        rule = Rule(RuleKind.OFFSET, offset=offset)
        if len(_OFFSET_RULES) < 4096:
            _OFFSET_RULES[offset] = rule
    return rule


_CFA_RULES = {}


def register_cfa(register: int, offset: int) -> CfaRule:
    """CfaRule(REGISTER, register, offset), shared like _offset_rule's Rules:
    a few (rsp+8, rsp+16, rbp+16, ...) make up nearly all CFA rules, and a
    shared rule lets renderers memoize rows by identity (render/cfi_dump.py)."""
    key = (register, offset)
    rule = _CFA_RULES.get(key)
    if rule is None:
        rule = CfaRule(CfaKind.REGISTER, register=register, offset=offset)
        if len(_CFA_RULES) < 4096:
            _CFA_RULES[key] = rule
    return rule


def program(owner: CIE | FDE) -> list[Instruction]:
    """The decoded instructions of a CIE or FDE (cached on it).

    A list of (offset in `instructions`, opcode, a, b). Operands come out
    factored and ready to use: advances in bytes, offsets multiplied by the
    data alignment, register rules as Rule objects (built once per entry,
    so executing the same FDE again allocates only the rows).
    """
    if owner._program is None:
        owner._program = _decode(owner)
    return owner._program


def _decode(owner):
    is_fde = isinstance(owner, FDE)
    cie = owner.cie if is_fde else owner
    section = owner.section
    data = owner.instructions
    base = owner.instructions_offset
    caf, daf = cie.code_align, cie.data_align
    order = section.region.byteorder
    out = []
    append = out.append
    i, n = 0, len(data)
    while i < n:
        at = i
        op = data[i]
        i += 1
        kind = op & 0xC0
        try:
            # The most frequent instructions come first, and their one-byte
            # LEB128 operands are read inline (the usual case).
            if kind == CFA_ADVANCE_LOC:
                append((at, CFA_ADVANCE_LOC, (op & 0x3F) * caf, None))
            elif op == CFA_DEF_CFA_OFFSET:
                if i < n and data[i] < 0x80:
                    value = data[i]
                    i += 1
                else:
                    value, i = _uleb(data, i)
                append((at, op, value, None))            # not factored (DWARF 5 6.4.2.2)
            elif op == CFA_NOP:
                append((at, CFA_NOP, None, None))
            elif kind == CFA_OFFSET:
                if i < n and data[i] < 0x80:
                    value = data[i]
                    i += 1
                else:
                    value, i = _uleb(data, i)
                append((at, CFA_OFFSET, op & 0x3F, _offset_rule(value * daf)))
            elif kind == CFA_RESTORE:
                append((at, CFA_RESTORE, op & 0x3F, None))
            elif op in _FIXED_ADVANCE_SIZES:
                size = _FIXED_ADVANCE_SIZES[op]
                if i + size > n:
                    raise _Malformed("operand runs past the end of the instructions")
                delta = int.from_bytes(data[i:i + size], order)
                i += size
                append((at, op, delta * caf, None))
            elif op == CFA_SET_LOC:
                address, i = _set_loc_operand(owner, cie, section, base, i, n)
                append((at, op, address, None))
            elif op == CFA_DEF_CFA:
                register, i = _uleb(data, i)
                value, i = _uleb(data, i)
                append((at, op, register, register_cfa(register, value)))
            elif op == CFA_DEF_CFA_SF:
                register, i = _uleb(data, i)
                value, i = _sleb(data, i)
                append((at, op, register, register_cfa(register, value * daf)))
            elif op == CFA_DEF_CFA_REGISTER:
                register, i = _uleb(data, i)
                append((at, op, register, None))
            elif op == CFA_DEF_CFA_OFFSET_SF:
                value, i = _sleb(data, i)
                append((at, op, value * daf, None))
            elif op == CFA_DEF_CFA_EXPRESSION:
                block, i = _block(data, i)
                append((at, op, None, CfaRule(CfaKind.EXPRESSION, expression=block)))
            elif op in (CFA_OFFSET_EXTENDED, CFA_VAL_OFFSET, CFA_GNU_NEGATIVE_OFFSET_EXTENDED):
                register, i = _uleb(data, i)
                value, i = _uleb(data, i)
                offset = -value * daf if op == CFA_GNU_NEGATIVE_OFFSET_EXTENDED else value * daf
                kind_name = RuleKind.VAL_OFFSET if op == CFA_VAL_OFFSET else RuleKind.OFFSET
                append((at, op, register, Rule(kind_name, offset=offset)))
            elif op in (CFA_OFFSET_EXTENDED_SF, CFA_VAL_OFFSET_SF):
                register, i = _uleb(data, i)
                value, i = _sleb(data, i)
                kind_name = RuleKind.VAL_OFFSET if op == CFA_VAL_OFFSET_SF else RuleKind.OFFSET
                append((at, op, register, Rule(kind_name, offset=value * daf)))
            elif op in (CFA_EXPRESSION, CFA_VAL_EXPRESSION):
                register, i = _uleb(data, i)
                block, i = _block(data, i)
                kind_name = RuleKind.EXPRESSION if op == CFA_EXPRESSION else RuleKind.VAL_EXPRESSION
                append((at, op, register, Rule(kind_name, expression=block)))
            elif op == CFA_REGISTER:
                register, i = _uleb(data, i)
                source, i = _uleb(data, i)
                append((at, op, register, Rule(RuleKind.REGISTER, register=source)))
            elif op in (CFA_SAME_VALUE, CFA_UNDEFINED):
                register, i = _uleb(data, i)
                append((at, op, register, _SAME_RULE if op == CFA_SAME_VALUE else _UNDEFINED_RULE))
            elif op == CFA_RESTORE_EXTENDED:
                register, i = _uleb(data, i)
                append((at, op, register, None))
            elif op == CFA_GNU_ARGS_SIZE:
                value, i = _uleb(data, i)
                append((at, op, value, None))
            elif op in (CFA_REMEMBER_STATE, CFA_RESTORE_STATE, CFA_GNU_WINDOW_SAVE,
                        CFA_AARCH64_NEGATE_RA_STATE_WITH_PC):
                append((at, op, None, None))
            else:
                raise DecodeError(section.name, base + at, "unknown CFA opcode 0x%02x" % op, DecodeKind.UNSUPPORTED)
        except _Malformed as exc:
            raise DecodeError(section.name, base + at, "%s: %s"
                              % (OPCODE_NAMES.get(op & 0xC0 or op, "opcode"), exc.cause), exc.kind) from None
    return out


def _set_loc_operand(owner, cie, section, base, i, n):
    """The target of DW_CFA_set_loc: a pointer in the FDE encoding (eh_frame)."""
    c = Cursor(section.region, base + i)
    func = getattr(owner, "start", None)
    bases = section.bases if func is None else dict(section.bases, func=func - section.bias)
    address = c.encoded(cie.fde_encoding, cie.address_size, bases, section.deref)
    if c.pos > base + n:
        raise _Malformed("operand runs past the end of the instructions")
    return address + section.bias, c.pos - base
