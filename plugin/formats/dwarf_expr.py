"""DWARF expressions as they appear in call frame information.

CFI uses DWARF expressions in three places: DW_CFA_def_cfa_expression (the
expression computes the CFA), DW_CFA_expression (it computes the address the
register is saved at; the CFA is pushed first) and DW_CFA_val_expression (it
computes the value itself; the CFA is pushed first). The callers pass that
initial CFA through `initial_stack`; this module knows nothing of rules.

`evaluate` runs an expression against the registers and memory of one frame
and returns the value with everything it read, so the evidence can show
where each number came from. `disassemble` renders an expression for people
and never raises. Both decode one operation at a time through the same op
table, so what is shown is exactly what is run.

Semantics, where DWARF leaves room or CFI practice differs from DWARF:

- Values are unsigned integers of the address size; every result wraps
  modulo 2**(8*address_size). div, shra, abs, ge/gt/le/lt and the signed
  constants treat values as two's complement of that size; mod, shr and the
  rest are unsigned (as in libgcc's unwinder).
- DW_OP_reg0..31 and DW_OP_regx push the register's *value*. In DWARF
  proper they are register location descriptions, which have no place in a
  CFI expression; libgcc's unwinder (and the reference op table this project
  follows) pushes the value instead, and that is what existing tables rely on.
- Shifts by the operand size or more give 0 (shl, shr) or the sign fill
  (shra), the mathematical result, instead of C's undefined behaviour.
- Division truncates toward zero, like C; dividing the most negative value
  by -1 wraps back to it.
- DW_OP_skip/bra targets may be anywhere in [0, len(expression)]; the end
  of the expression ends the evaluation. A taken branch outside that is an
  error; a branch into the middle of an operation decodes from there, as
  an interpreter reading the bytes would.
- DW_OP_GNU_encoded_addr: relative encodings take their base from `bases`
  ("text", "data", "func"); pcrel and aligned need the address of the
  expression's first byte in the target, `bases["expression"]`, because the
  pointer is relative to (or aligned at) its own address. DW_EH_PE_indirect
  reads the pointer through `read_memory`, recorded like any other read.

Every failure caused by the expression is a DecodeError("DWARF expression",
offset of the operation, cause). Memory the target cannot supply raises
MemoryReadError from `read_memory`, passed through untouched so the caller
can tell "bad table" from "unreadable stack".
"""

from dataclasses import dataclass, field

from plugin.errors import DecodeError, MemoryReadError
from plugin.memory import (PE_ABSPTR, PE_ALIGNED, PE_DATAREL, PE_FUNCREL, PE_INDIRECT,
                      PE_OMIT, PE_PCREL, PE_SDATA2, PE_SDATA4, PE_SDATA8, PE_SLEB128,
                      PE_TEXTREL, PE_UDATA2, PE_UDATA4, PE_UDATA8, PE_ULEB128, Region)

SECTION = "DWARF expression"


@dataclass
class Evaluation:
    value: int                  # top of stack at the end, masked to the address size
    reads: list = field(default_factory=list)           # [(address, size, value)] in order
    registers_used: list = field(default_factory=list)  # DWARF numbers, first use order, no repeats


class _Fault(Exception):
    """Something wrong with the operation being decoded or run.

    Raised deep inside helpers that do not know the operation's offset; the
    loop turns it into a DecodeError at the offset of the current operation.
    """

    def __init__(self, cause):
        super().__init__(cause)
        self.cause = cause


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


def _signed(value, bits):
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
        raise _Fault("DW_OP_pick %d needs %d values, the stack has %d"
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
        raise _Fault("DW_OP_deref_size %d: the size must be 1..%d" % (size, m.size))
    m.push(m.load(m.stack.pop(), size))


def _call_frame_cfa(m, opcode, operands, next_pc):
    if m.cfa is None:
        raise _Fault("DW_OP_call_frame_cfa: the CFA is not known here")
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
        raise _Fault("DW_OP_div: division by zero")
    sa, sb = _signed(a, bits), _signed(b, bits)
    quotient = abs(sa) // abs(sb)          # truncate toward zero, like C
    return -quotient if (sa < 0) != (sb < 0) else quotient


def _mod(a, b, bits):
    if b == 0:
        raise _Fault("DW_OP_mod: division by zero")
    return a % b


def _shl(a, b, bits):
    # Guard the count: a huge shift would build a huge Python integer.
    return 0 if b >= bits else a << b


def _shr(a, b, bits):
    return 0 if b >= bits else a >> b


def _shra(a, b, bits):
    return _signed(a, bits) >> min(b, bits - 1)


def _cmp(test):
    return lambda a, b, bits: int(test(_signed(a, bits), _signed(b, bits)))


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
    0x19: ("DW_OP_abs", lambda a, bits: abs(_signed(a, bits))),
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


def _decode(cursor, address_size, pointer):
    """Decode the operation at cursor.pos: (opcode, _Op, operands); cursor ends after it.

    pointer(cursor, encoding) reads DW_OP_GNU_encoded_addr's pointer; the
    evaluator resolves it, the disassembler only shows it.
    """
    try:
        opcode = cursor.u8()
    except DecodeError as exc:
        raise _Fault(exc.cause) from None
    op = OPS.get(opcode)
    if op is None:
        name = _UNSUPPORTED.get(opcode)
        if name:
            raise _Fault("%s (0x%02x) is not supported in CFI expressions" % (name, opcode))
        raise _Fault("unknown opcode 0x%02x" % opcode)
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
        raise _Fault("%s: %s" % (op.name, exc.cause)) from None
    return opcode, op, tuple(operands)


def _check_encoding(encoding):
    if encoding == PE_OMIT:
        raise _Fault("DW_OP_GNU_encoded_addr: encoding DW_EH_PE_omit has no pointer")
    if encoding & 0x70 not in _KNOWN_APPLICATIONS:
        raise _Fault("DW_OP_GNU_encoded_addr: unknown pointer application 0x%02x" % (encoding & 0x70))


# ---------------------------------------------------------------------------
# Evaluation


class _Machine:
    def __init__(self, arch, read_register, read_memory, cfa, max_stack, end):
        self.size = arch.address_size
        self.bits = 8 * arch.address_size
        self.mask = (1 << self.bits) - 1
        self.byteorder = arch.byteorder
        self.arch = arch
        self.read_register = read_register
        self.read_memory = read_memory
        self.cfa = None if cfa is None else cfa & self.mask
        self.max_stack = max_stack
        self.end = end
        self.stack = []
        self.reads = []
        self.registers_used = []

    def push(self, value):
        if len(self.stack) >= self.max_stack:
            raise _Fault("stack overflow (limit %d values)" % self.max_stack)
        self.stack.append(value & self.mask)

    def register(self, number):
        value = self.read_register(number)
        if value is None:
            raise _Fault("register %s (%d) has no known value"
                         % (self.arch.name_of(number), number))
        if number not in self.registers_used:
            self.registers_used.append(number)
        return value & self.mask

    def load(self, address, size):
        data = self.read_memory(address, size)     # MemoryReadError passes through
        if len(data) != size:
            raise MemoryReadError(address, size, "short read (%d of %d bytes)" % (len(data), size))
        value = int.from_bytes(bytes(data), self.byteorder)
        self.reads.append((address, size, value))
        return value

    def jump(self, target):
        if not 0 <= target <= self.end:
            raise _Fault("branch target %d is outside the expression (0..%d)" % (target, self.end))
        return target


def evaluate(expression, *, arch, read_register, read_memory,
             initial_stack=(), cfa=None, bases=None, max_steps=10000, max_stack=256):
    """Run `expression` and return an Evaluation (value, reads, registers_used).

    arch: plugin.arch.Arch. read_register(n) -> int or None (unknown).
    read_memory(address, size) -> bytes, may raise MemoryReadError (passed on).
    initial_stack: pushed in order before the first op (DW_CFA_expression
    and DW_CFA_val_expression push the CFA). cfa: value of
    DW_OP_call_frame_cfa. bases: {"text", "data", "func", "expression"} for
    DW_OP_GNU_encoded_addr (see the module docstring). At most `max_steps`
    operations run and the stack holds at most `max_stack` values.
    """
    expression = bytes(expression)
    bases = dict(bases or {})
    size = arch.address_size
    region = Region.from_bytes(SECTION, bases.get("expression", 0), expression, arch.byteorder)
    cursor = region.cursor()
    m = _Machine(arch, read_register, read_memory, cfa, max_stack, len(expression))

    def pointer(cur, encoding):
        _check_encoding(encoding)
        if encoding & 0x70 in (PE_PCREL, PE_ALIGNED) and "expression" not in bases:
            raise _Fault("DW_OP_GNU_encoded_addr: encoding 0x%02x needs the expression's address"
                         " (bases['expression'])" % encoding)
        # Indirection is done by _encoded_addr through read_memory, so the
        # read is recorded and an unreadable pointer is a MemoryReadError.
        return cur.encoded(encoding & ~PE_INDIRECT, size, bases)

    pc = 0
    try:
        for value in initial_stack:
            m.push(value)
    except _Fault as fault:
        raise DecodeError(SECTION, 0, "initial stack: " + fault.cause) from None

    steps = 0
    while pc < len(expression):
        if steps >= max_steps:
            raise DecodeError(SECTION, pc, "step limit of %d operations reached (a loop?)" % max_steps)
        steps += 1
        cursor.pos = pc
        try:
            opcode, op, operands = _decode(cursor, size, pointer)
            if len(m.stack) < op.pops:
                raise _Fault("%s needs %d value%s, the stack has %d (underflow)"
                             % (op.name, op.pops, "s" if op.pops > 1 else "", len(m.stack)))
            target = op.run(m, opcode, operands, cursor.pos)
        except _Fault as fault:
            raise DecodeError(SECTION, pc, fault.cause) from None
        pc = cursor.pos if target is None else target

    if not m.stack:
        raise DecodeError(SECTION, pc, "the expression leaves the stack empty")
    return Evaluation(m.stack[-1], m.reads, m.registers_used)


# ---------------------------------------------------------------------------
# Disassembly

_FORMAT_NAMES = {PE_ABSPTR: "absptr", PE_ULEB128: "uleb128", PE_UDATA2: "udata2",
                 PE_UDATA4: "udata4", PE_UDATA8: "udata8", PE_SLEB128: "sleb128",
                 PE_SDATA2: "sdata2", PE_SDATA4: "sdata4", PE_SDATA8: "sdata8"}
_SIGNED_FORMATS = (PE_SLEB128, PE_SDATA2, PE_SDATA4, PE_SDATA8)
_APPLICATION_NAMES = {PE_PCREL: "pcrel", PE_TEXTREL: "textrel", PE_DATAREL: "datarel",
                      PE_FUNCREL: "funcrel", PE_ALIGNED: "aligned"}


def _encoding_text(encoding):
    words = []
    if encoding & PE_INDIRECT:
        words.append("indirect")
    if encoding & 0x70:
        words.append(_APPLICATION_NAMES[encoding & 0x70])
    words.append(_FORMAT_NAMES[encoding & 0x0f])
    return " ".join(words)


def _number(value):
    # Small numbers read best in decimal; addresses and masks in hex.
    if abs(value) < 4096:
        return "%d" % value
    return "-0x%x" % -value if value < 0 else "0x%x" % value


def _render(op, opcode, operands, next_pc, arch):
    if op.show == "reg":
        return "%s (%s)" % (op.name, arch.name_of(opcode - 0x50))
    if op.show == "breg":
        return "%s (%s) %+d" % (op.name, arch.name_of(opcode - 0x70), operands[0])
    if op.show == "regx":
        return "%s %d (%s)" % (op.name, operands[0], arch.name_of(operands[0]))
    if op.show == "bregx":
        return "%s %d (%s) %+d" % (op.name, operands[0], arch.name_of(operands[0]), operands[1])
    if op.show == "branch":
        target = next_pc + operands[0]
        return "%s %+d (to %s0x%x)" % (op.name, operands[0], "-" if target < 0 else "", abs(target))
    if op.show == "hex":
        return "%s 0x%x" % (op.name, operands[0])
    if op.show == "enc":
        encoding, raw = operands
        if encoding & 0x0f in _SIGNED_FORMATS:
            raw = _signed(raw, 8 * arch.address_size)
        return "%s %s %s" % (op.name, _encoding_text(encoding), _number(raw))
    return " ".join([op.name] + [_number(v) for v in operands])


def disassemble(expression, arch, *, address=None):
    """`expression` as "DW_OP_breg7 (rsp) +8; DW_OP_lit15; ...".

    Never raises for bad bytes: the text ends with "<bad: reason>" where
    decoding stopped. DW_OP_GNU_encoded_addr shows its raw pointer field
    (before any base is added); `address`, the target address of the
    expression, is needed only to place DW_EH_PE_aligned pointers.
    """
    expression = bytes(expression)
    size = arch.address_size
    region = Region.from_bytes(SECTION, address or 0, expression, arch.byteorder)
    cursor = region.cursor()

    def pointer(cur, encoding):
        _check_encoding(encoding)
        if encoding & 0x0f not in _FORMAT_NAMES:
            raise _Fault("DW_OP_GNU_encoded_addr: unknown pointer format 0x%02x" % (encoding & 0x0f))
        if encoding & 0x70 == PE_ALIGNED:
            if address is None:
                raise _Fault("DW_OP_GNU_encoded_addr: an aligned pointer needs the expression's address")
            return cur.encoded(encoding & (0x70 | 0x0f), size)
        return cur.encoded(encoding & 0x0f, size)   # the raw field, no base added

    parts = []
    while cursor.pos < len(expression):
        start = cursor.pos
        try:
            opcode, op, operands = _decode(cursor, size, pointer)
        except _Fault as fault:
            parts.append("<bad: %s at offset 0x%x>" % (fault.cause, start))
            break
        parts.append(_render(op, opcode, operands, cursor.pos, arch))
    return "; ".join(parts)
