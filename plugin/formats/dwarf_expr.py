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
from __future__ import annotations

from dataclasses import dataclass, field

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.model import rules
from plugin.formats.dwarf_ops import OPS, Fault, check_encoding, decode_op, signed

__all__ = ["OPS", "Evaluation", "evaluate", "disassemble"]
from plugin.memory import (PE_ABSPTR, PE_ALIGNED, PE_DATAREL, PE_FUNCREL, PE_INDIRECT,
                      PE_PCREL, PE_SDATA2, PE_SDATA4, PE_SDATA8, PE_SLEB128,
                      PE_TEXTREL, PE_UDATA2, PE_UDATA4, PE_UDATA8, PE_ULEB128, Region)

SECTION = "DWARF expression"


@dataclass
class Evaluation:
    value: int                  # top of stack at the end, masked to the address size
    reads: list = field(default_factory=list)           # [(address, size, value)] in order
    registers_used: list = field(default_factory=list)  # DWARF numbers, first use order, no repeats


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
            raise Fault("stack overflow (limit %d values)" % self.max_stack, DecodeKind.LIMIT)
        self.stack.append(value & self.mask)

    def register(self, number):
        value = self.read_register(number)
        if value is None:
            raise Fault("register %s (%d) has no known value"
                         % (self.arch.name_of(number), number), DecodeKind.ABSENT)
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
            raise Fault("branch target %d is outside the expression (0..%d)" % (target, self.end))
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
        check_encoding(encoding)
        if encoding & 0x70 in (PE_PCREL, PE_ALIGNED) and "expression" not in bases:
            raise Fault("DW_OP_GNU_encoded_addr: encoding 0x%02x needs the expression's address"
                         " (bases['expression'])" % encoding)
        # Indirection is done by _encoded_addr through read_memory, so the
        # read is recorded and an unreadable pointer is a MemoryReadError.
        return cur.encoded(encoding & ~PE_INDIRECT, size, bases)

    pc = 0
    try:
        for value in initial_stack:
            m.push(value)
    except Fault as fault:
        raise DecodeError(SECTION, 0, "initial stack: " + fault.cause, fault.kind) from None

    steps = 0
    while pc < len(expression):
        if steps >= max_steps:
            raise DecodeError(SECTION, pc, "step limit of %d operations reached (a loop?)" % max_steps,
                              DecodeKind.LIMIT)
        steps += 1
        cursor.pos = pc
        try:
            opcode, op, operands = decode_op(cursor, size, pointer)
            if len(m.stack) < op.pops:
                raise Fault("%s needs %d value%s, the stack has %d (underflow)"
                             % (op.name, op.pops, "s" if op.pops > 1 else "", len(m.stack)))
            target = op.run(m, opcode, operands, cursor.pos)
        except Fault as fault:
            raise DecodeError(SECTION, pc, fault.cause, fault.kind) from None
        pc = cursor.pos if target is None else target

    if not m.stack:
        raise DecodeError(SECTION, pc, "the expression leaves the stack empty", DecodeKind.MALFORMED)
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
            raw = signed(raw, 8 * arch.address_size)
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
        check_encoding(encoding)
        if encoding & 0x0f not in _FORMAT_NAMES:
            raise Fault("DW_OP_GNU_encoded_addr: unknown pointer format 0x%02x" % (encoding & 0x0f),
                        DecodeKind.UNSUPPORTED)
        if encoding & 0x70 == PE_ALIGNED:
            if address is None:
                raise Fault("DW_OP_GNU_encoded_addr: an aligned pointer needs the expression's address")
            return cur.encoded(encoding & (0x70 | 0x0f), size)
        return cur.encoded(encoding & 0x0f, size)   # the raw field, no base added

    parts = []
    while cursor.pos < len(expression):
        start = cursor.pos
        try:
            opcode, op, operands = decode_op(cursor, size, pointer)
        except Fault as fault:
            parts.append("<bad: %s at offset 0x%x>" % (fault.cause, start))
            break
        parts.append(_render(op, opcode, operands, cursor.pos, arch))
    return "; ".join(parts)


rules.show_expressions_with(disassemble)     # rules print their expressions disassembled (model is below us)
