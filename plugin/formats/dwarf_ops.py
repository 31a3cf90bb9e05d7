"""The DWARF expression operations CFI uses: one table of operations (name,
operands, stack needs, how each runs and how it is shown) and the decoder of
one operation. plugin/formats/dwarf_expr.py evaluates and disassembles
expressions through it, so what is shown is exactly what is run.
"""
from __future__ import annotations

from dataclasses import dataclass

from plugin.errors import DecodeError, DecodeKind
from typing import Iterator, Tuple

from plugin.memory import PE_ALIGNED, PE_DATAREL, PE_FUNCREL, PE_INDIRECT, PE_OMIT, PE_PCREL, PE_TEXTREL, Region

class Fault(Exception):
    """Something wrong with the operation being decoded or run.

    Raised deep inside helpers that do not know the operation's offset; the
    loop turns it into a DecodeError at the offset of the current operation.
    """

    def __init__(self, cause, kind: DecodeKind = DecodeKind.MALFORMED):
        super().__init__(cause)
        self.cause = cause
        self.kind = kind


# ---------------------------------------------------------------------------
# The op table.
#
# Each entry: name, operand kinds (decoded in order), how many stack values
# the op needs, the function that runs it and how its operands are shown.
# Operand kinds: "addr" (address-sized unsigned), "u8".."s64" (fixed size),
# "uleb", "sleb", "enc" (DW_OP_GNU_encoded_addr: encoding byte + pointer,
# decoded as two operands).


@dataclass(frozen=True)
class _Op:
    name: str
    operands: tuple
    pops: int
    run: object                 # run(machine, opcode, operands, next_pc) -> new pc or None
    show: str = "plain"


def signed(value, bits):
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


# --- operations; each gets the machine `m`, and returns a new pc only to jump

def _push_operand(m, opcode, operands, next_pc):
    m.push(operands[0])


def _push_lit(m, opcode, operands, next_pc):
    m.push(opcode - 0x30)


def _reg(m, opcode, operands, next_pc):
    m.push(m.register(opcode - 0x50))


def _regx(m, opcode, operands, next_pc):
    m.push(m.register(operands[0]))


def _breg(m, opcode, operands, next_pc):
    m.push(m.register(opcode - 0x70) + operands[0])


def _bregx(m, opcode, operands, next_pc):
    m.push(m.register(operands[0]) + operands[1])


def _dup(m, opcode, operands, next_pc):
    m.push(m.stack[-1])


def _drop(m, opcode, operands, next_pc):
    m.stack.pop()


def _over(m, opcode, operands, next_pc):
    m.push(m.stack[-2])


def _pick(m, opcode, operands, next_pc):
    index = operands[0]
    if index >= len(m.stack):
        raise Fault("DW_OP_pick %d needs %d values, the stack has %d"
                     % (index, index + 1, len(m.stack)))
    m.push(m.stack[-1 - index])


def _swap(m, opcode, operands, next_pc):
    m.stack[-1], m.stack[-2] = m.stack[-2], m.stack[-1]


def _rot(m, opcode, operands, next_pc):
    # top -> third, second -> top, third -> second
    s = m.stack
    s[-3], s[-2], s[-1] = s[-1], s[-3], s[-2]


def _deref(m, opcode, operands, next_pc):
    m.push(m.load(m.stack.pop(), m.size))


def _deref_size(m, opcode, operands, next_pc):
    size = operands[0]
    if not 1 <= size <= m.size:
        raise Fault("DW_OP_deref_size %d: the size must be 1..%d" % (size, m.size))
    m.push(m.load(m.stack.pop(), size))


def _call_frame_cfa(m, opcode, operands, next_pc):
    if m.cfa is None:
        raise Fault("DW_OP_call_frame_cfa: the CFA is not known here")
    m.push(m.cfa)


def _nop(m, opcode, operands, next_pc):
    pass


def _encoded_addr(m, opcode, operands, next_pc):
    encoding, value = operands
    if encoding & PE_INDIRECT:
        value = m.load(value, m.size)
    m.push(value)


def _plus_uconst(m, opcode, operands, next_pc):
    m.push(m.stack.pop() + operands[0])


def _skip(m, opcode, operands, next_pc):
    return m.jump(next_pc + operands[0])


def _bra(m, opcode, operands, next_pc):
    if m.stack.pop() != 0:
        return m.jump(next_pc + operands[0])
    return None


def _div(a, b, bits):
    if b == 0:
        raise Fault("DW_OP_div: division by zero")
    sa, sb = signed(a, bits), signed(b, bits)
    quotient = abs(sa) // abs(sb)          # truncate toward zero, like C
    return -quotient if (sa < 0) != (sb < 0) else quotient


def _mod(a, b, bits):
    if b == 0:
        raise Fault("DW_OP_mod: division by zero")
    return a % b


def _shl(a, b, bits):
    # Guard the count: a huge shift would build a huge Python integer.
    return 0 if b >= bits else a << b


def _shr(a, b, bits):
    return 0 if b >= bits else a >> b


def _shra(a, b, bits):
    return signed(a, bits) >> min(b, bits - 1)


def _cmp(test):
    return lambda a, b, bits: int(test(signed(a, bits), signed(b, bits)))


_BINARY = {
    0x1a: ("DW_OP_and", lambda a, b, bits: a & b),
    0x1b: ("DW_OP_div", _div),
    0x1c: ("DW_OP_minus", lambda a, b, bits: a - b),
    0x1d: ("DW_OP_mod", _mod),
    0x1e: ("DW_OP_mul", lambda a, b, bits: a * b),
    0x21: ("DW_OP_or", lambda a, b, bits: a | b),
    0x22: ("DW_OP_plus", lambda a, b, bits: a + b),
    0x24: ("DW_OP_shl", _shl),
    0x25: ("DW_OP_shr", _shr),
    0x26: ("DW_OP_shra", _shra),
    0x27: ("DW_OP_xor", lambda a, b, bits: a ^ b),
    0x29: ("DW_OP_eq", lambda a, b, bits: int(a == b)),
    0x2a: ("DW_OP_ge", _cmp(lambda a, b: a >= b)),
    0x2b: ("DW_OP_gt", _cmp(lambda a, b: a > b)),
    0x2c: ("DW_OP_le", _cmp(lambda a, b: a <= b)),
    0x2d: ("DW_OP_lt", _cmp(lambda a, b: a < b)),
    0x2e: ("DW_OP_ne", lambda a, b, bits: int(a != b)),
}

_UNARY = {
    0x19: ("DW_OP_abs", lambda a, bits: abs(signed(a, bits))),
    0x1f: ("DW_OP_neg", lambda a, bits: -a),
    0x20: ("DW_OP_not", lambda a, bits: ~a),
}


def _binary(m, opcode, operands, next_pc):
    rhs = m.stack.pop()
    lhs = m.stack.pop()
    m.push(_BINARY[opcode][1](lhs, rhs, m.bits))


def _unary(m, opcode, operands, next_pc):
    m.push(_UNARY[opcode][1](m.stack.pop(), m.bits))


def _build_table():
    table = {
        0x03: _Op("DW_OP_addr", ("addr",), 0, _push_operand, "hex"),
        0x06: _Op("DW_OP_deref", (), 1, _deref),
        0x08: _Op("DW_OP_const1u", ("u8",), 0, _push_operand),
        0x09: _Op("DW_OP_const1s", ("s8",), 0, _push_operand),
        0x0a: _Op("DW_OP_const2u", ("u16",), 0, _push_operand),
        0x0b: _Op("DW_OP_const2s", ("s16",), 0, _push_operand),
        0x0c: _Op("DW_OP_const4u", ("u32",), 0, _push_operand),
        0x0d: _Op("DW_OP_const4s", ("s32",), 0, _push_operand),
        0x0e: _Op("DW_OP_const8u", ("u64",), 0, _push_operand),
        0x0f: _Op("DW_OP_const8s", ("s64",), 0, _push_operand),
        0x10: _Op("DW_OP_constu", ("uleb",), 0, _push_operand),
        0x11: _Op("DW_OP_consts", ("sleb",), 0, _push_operand),
        0x12: _Op("DW_OP_dup", (), 1, _dup),
        0x13: _Op("DW_OP_drop", (), 1, _drop),
        0x14: _Op("DW_OP_over", (), 2, _over),
        0x15: _Op("DW_OP_pick", ("u8",), 0, _pick),      # depth checked by _pick
        0x16: _Op("DW_OP_swap", (), 2, _swap),
        0x17: _Op("DW_OP_rot", (), 3, _rot),
        0x23: _Op("DW_OP_plus_uconst", ("uleb",), 1, _plus_uconst),
        0x28: _Op("DW_OP_bra", ("s16",), 1, _bra, "branch"),
        0x2f: _Op("DW_OP_skip", ("s16",), 0, _skip, "branch"),
        0x90: _Op("DW_OP_regx", ("uleb",), 0, _regx, "regx"),
        0x92: _Op("DW_OP_bregx", ("uleb", "sleb"), 0, _bregx, "bregx"),
        0x94: _Op("DW_OP_deref_size", ("u8",), 1, _deref_size),
        0x96: _Op("DW_OP_nop", (), 0, _nop),
        0x9c: _Op("DW_OP_call_frame_cfa", (), 0, _call_frame_cfa),
        0xf1: _Op("DW_OP_GNU_encoded_addr", ("enc",), 0, _encoded_addr, "enc"),
    }
    for opcode, (name, _) in _BINARY.items():
        table[opcode] = _Op(name, (), 2, _binary)
    for opcode, (name, _) in _UNARY.items():
        table[opcode] = _Op(name, (), 1, _unary)
    for n in range(32):
        table[0x30 + n] = _Op("DW_OP_lit%d" % n, (), 0, _push_lit)
        table[0x50 + n] = _Op("DW_OP_reg%d" % n, (), 0, _reg, "reg")
        table[0x70 + n] = _Op("DW_OP_breg%d" % n, ("sleb",), 0, _breg, "breg")
    return table


OPS = _build_table()

# Standard ops we recognise but do not run: they describe locations or need a
# debug-info context (types, DIEs, TLS) that CFI does not have. Named only so
# the error says what the byte was.
_UNSUPPORTED = {
    0x18: "DW_OP_xderef", 0x91: "DW_OP_fbreg", 0x93: "DW_OP_piece",
    0x95: "DW_OP_xderef_size", 0x97: "DW_OP_push_object_address",
    0x98: "DW_OP_call2", 0x99: "DW_OP_call4", 0x9a: "DW_OP_call_ref",
    0x9b: "DW_OP_form_tls_address", 0x9d: "DW_OP_bit_piece",
    0x9e: "DW_OP_implicit_value", 0x9f: "DW_OP_stack_value",
    0xa3: "DW_OP_entry_value", 0xe0: "DW_OP_GNU_push_tls_address",
    0xf3: "DW_OP_GNU_entry_value",
}

_FIXED_READERS = {
    "u8": lambda c: c.u8(), "s8": lambda c: c.s8(),
    "u16": lambda c: c.u16(), "s16": lambda c: c.s16(),
    "u32": lambda c: c.u32(), "s32": lambda c: c.s32(),
    "u64": lambda c: c.u64(), "s64": lambda c: c.s64(),
    "uleb": lambda c: c.uleb(), "sleb": lambda c: c.sleb(),
}

_KNOWN_APPLICATIONS = (0, PE_PCREL, PE_TEXTREL, PE_DATAREL, PE_FUNCREL, PE_ALIGNED)


def decode_op(cursor, address_size, pointer):
    """Decode the operation at cursor.pos: (opcode, _Op, operands); cursor ends after it.

    pointer(cursor, encoding) reads DW_OP_GNU_encoded_addr's pointer; the
    evaluator resolves it, the disassembler only shows it.
    """
    try:
        opcode = cursor.u8()
    except DecodeError as exc:
        raise Fault(exc.cause, exc.kind) from None
    op = OPS.get(opcode)
    if op is None:
        name = _UNSUPPORTED.get(opcode)
        if name:
            raise Fault("%s (0x%02x) is not supported in CFI expressions" % (name, opcode),
                        DecodeKind.UNSUPPORTED)
        raise Fault("unknown opcode 0x%02x" % opcode, DecodeKind.UNSUPPORTED)
    operands = []
    try:
        for kind in op.operands:
            if kind == "addr":
                operands.append(cursor.uint(address_size))
            elif kind == "enc":
                encoding = cursor.u8()
                operands.append(encoding)
                operands.append(pointer(cursor, encoding))
            else:
                operands.append(_FIXED_READERS[kind](cursor))
    except DecodeError as exc:
        # Region/Cursor errors name the byte position of the operand; the
        # caller reports the operation's offset, so keep only the cause.
        raise Fault("%s: %s" % (op.name, exc.cause), exc.kind) from None
    return opcode, op, tuple(operands)


def check_encoding(encoding):
    if encoding == PE_OMIT:
        raise Fault("DW_OP_GNU_encoded_addr: encoding DW_EH_PE_omit has no pointer")
    if encoding & 0x70 not in _KNOWN_APPLICATIONS:
        raise Fault("DW_OP_GNU_encoded_addr: unknown pointer application 0x%02x" % (encoding & 0x70),
                    DecodeKind.UNSUPPORTED)


def operations(expression: bytes, address_size: int, byteorder: str = "little") -> Iterator[Tuple[int, tuple]]:
    """Each operation of `expression` in order, as (opcode, operands); Fault where the bytes are not one.

    For readers that look at what an expression means without running it
    (the row renderer, the instruction analysis). DW_OP_GNU_encoded_addr
    gives its encoding and its raw pointer field.
    """
    cursor = Region.from_bytes("DWARF expression", 0, expression, byteorder).cursor()

    def pointer(cur, encoding):
        check_encoding(encoding)
        return cur.encoded(encoding & 0x0f, address_size)

    while cursor.pos < len(expression):
        opcode, _, operands = decode_op(cursor, address_size, pointer)
        yield opcode, operands
