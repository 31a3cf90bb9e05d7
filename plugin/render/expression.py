"""DWARF expressions and unwind rows written as a person reads them.

`DW_OP_breg7 (rsp) +160; DW_OP_deref` becomes `*(rsp+160)`, the same
spelling an SFrame flex rule or a register+offset CFA gets, so a row reads
the same whatever table it came from. Expressions using operations this
renderer does not know (branches, comparisons, stack shuffles past the
simple ones) are shown as their raw operations instead: never a guess.
"""
from __future__ import annotations

from typing import List, Optional

from plugin.formats.dwarf_ops import Fault, operations
from plugin.model.rules import CfaKind, RuleKind

_BINARY = {0x1a: "&", 0x1b: "/", 0x1c: "-", 0x1e: "*", 0x21: "|", 0x22: "+",
           0x24: "<<", 0x25: ">>", 0x26: ">>>", 0x27: "^"}
_CONSTANTS = range(0x08, 0x12)      # DW_OP_const1u .. DW_OP_consts


class _Unknown(Exception):
    pass


def _offset(base: str, offset: int) -> str:
    return base if offset == 0 else "%s%+d" % (base, offset)


def _push(stack: List[str], op: int, operands: tuple, arch) -> None:
    """Apply one operation to a stack of texts; _Unknown for one this renderer does not show."""
    if 0x30 <= op <= 0x4f:                      # DW_OP_lit0..31
        stack.append(str(op - 0x30))
    elif 0x50 <= op <= 0x6f:                    # DW_OP_reg0..31: the register itself
        stack.append(arch.name_of(op - 0x50))
    elif 0x70 <= op <= 0x8f:                    # DW_OP_breg0..31 offset
        stack.append(_offset(arch.name_of(op - 0x70), operands[0]))
    elif op == 0x92:                            # DW_OP_bregx reg offset
        stack.append(_offset(arch.name_of(operands[0]), operands[1]))
    elif op == 0x90:                            # DW_OP_regx
        stack.append(arch.name_of(operands[0]))
    elif op in _CONSTANTS:
        value = operands[0]
        stack.append(str(value) if abs(value) < 4096 else "0x%x" % value)
    elif op == 0x9c:                            # DW_OP_call_frame_cfa
        stack.append("CFA")
    elif op == 0x06:                            # DW_OP_deref
        stack.append("*(%s)" % stack.pop())
    elif op == 0x23:                            # DW_OP_plus_uconst
        stack.append(_offset(stack.pop(), operands[0]))
    elif op in _BINARY:
        right, left = stack.pop(), stack.pop()
        if op in (0x22, 0x1c) and right.isdigit():
            stack.append(_offset(left, int(right) if op == 0x22 else -int(right)))
        else:
            stack.append("(%s %s %s)" % (left, _BINARY[op], right))
    elif op == 0x12:                            # DW_OP_dup
        stack.append(stack[-1])
    elif op == 0x13:                            # DW_OP_drop
        stack.pop()
    elif op == 0x16:                            # DW_OP_swap
        stack[-1], stack[-2] = stack[-2], stack[-1]
    elif op == 0x14:                            # DW_OP_over
        stack.append(stack[-2])
    else:
        raise _Unknown()


def readable(expression: bytes, arch) -> Optional[str]:
    """`*(rsp+160)` for `DW_OP_breg7 (rsp) +160; DW_OP_deref`; None when not expressible."""
    stack: List[str] = []
    try:
        for op, operands in operations(bytes(expression), arch.address_size, arch.byteorder):
            _push(stack, op, operands, arch)
    except (_Unknown, Fault, IndexError):
        return None
    return stack[-1] if len(stack) == 1 else None


def _raw(expression: bytes, arch) -> str:
    from plugin.formats.dwarf_expr import disassemble
    return disassemble(expression, arch)


def _expression(expression: bytes, arch, verbose: bool) -> str:
    text = readable(expression, arch)
    if text is None:
        return "{%s}" % _raw(expression, arch)
    return "%s {%s}" % (text, _raw(expression, arch)) if verbose else text


def cfa_text(cfa, arch, verbose: bool = False) -> str:
    """`rsp+160`, `*(rsp+160)` (SFrame flex or a DWARF expression alike)."""
    if cfa.kind == CfaKind.EXPRESSION:
        return _expression(cfa.expression, arch, verbose)
    base = _offset(arch.name_of(cfa.register), cfa.offset)
    return _offset("*(%s)" % base, cfa.added) if cfa.deref else base


def rule_text(rule, arch, verbose: bool = False) -> str:
    """`[CFA-16]` (saved at), `CFA+8` (the value), `rbx`, `unchanged`, `undefined`."""
    if rule.kind == RuleKind.UNDEFINED:
        return "undefined"
    if rule.kind == RuleKind.SAME:
        return "unchanged"
    if rule.kind == RuleKind.OFFSET:
        return "[%s]" % _offset("CFA", rule.offset)
    if rule.kind == RuleKind.VAL_OFFSET:
        return _offset("CFA", rule.offset)
    if rule.kind == RuleKind.REGISTER:
        return arch.name_of(rule.register)
    text = _expression(rule.expression, arch, verbose)
    return "[%s]" % text if rule.kind == RuleKind.EXPRESSION else text


def row_order(row, arch) -> List[int]:
    """The registers of a row in the order explain shows them: the return address first, then by number."""
    ra = getattr(arch, "ra", None)
    return sorted(row.registers, key=lambda n: (n != ra, n))


def row_rules(row, arch, verbose: bool = False) -> List[str]:
    """`CFA = rsp+16`, then `rip = [CFA-8]`, ... in row_order."""
    return ["CFA = " + cfa_text(row.cfa, arch, verbose)] + [
        "%s = %s" % (arch.name_of(n), rule_text(row.registers[n], arch, verbose)) for n in row_order(row, arch)]
