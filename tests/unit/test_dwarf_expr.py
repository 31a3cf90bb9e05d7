"""Tests of plugin/formats/dwarf_expr.py: every op, the PLT expression, every
error, random input (hypothesis) and llvm-dwarfdump as an oracle for the
disassembler.

Expressions are hand-assembled here with this file's own encoders and its
own op spec (SPEC), written from the DWARF op table, not taken from the
module under test.
"""

import re
import struct
import time
from fractions import Fraction
import random

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from plugin import arch as arches
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import dwarf_expr
from plugin.formats.dwarf_expr import Evaluation, disassemble, evaluate
from support import need_tool, run as run_tool

X86 = arches.BY_NAME["x86_64"]
I386 = arches.BY_NAME["i386"]
S390X = arches.BY_NAME["s390x"]       # big-endian, 8-byte addresses
AARCH64 = arches.BY_NAME["aarch64"]
ALL_ARCHES = (X86, I386, S390X, AARCH64)

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1

# --- opcodes, from the DWARF op table (reference write-up, DWARF 5 7.7.1)
ADDR, DEREF = 0x03, 0x06
CONST1U, CONST1S, CONST2U, CONST2S = 0x08, 0x09, 0x0A, 0x0B
CONST4U, CONST4S, CONST8U, CONST8S = 0x0C, 0x0D, 0x0E, 0x0F
CONSTU, CONSTS = 0x10, 0x11
DUP, DROP, OVER, PICK, SWAP, ROT = 0x12, 0x13, 0x14, 0x15, 0x16, 0x17
ABS, AND, DIV, MINUS, MOD, MUL, NEG, NOT, OR, PLUS = 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x21, 0x22
PLUS_UCONST, SHL, SHR, SHRA, XOR = 0x23, 0x24, 0x25, 0x26, 0x27
BRA, EQ, GE, GT, LE, LT, NE, SKIP = 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F
LIT0, REG0, BREG0 = 0x30, 0x50, 0x70
REGX, BREGX, DEREF_SIZE, NOP = 0x90, 0x92, 0x94, 0x96
CALL_FRAME_CFA, GNU_ENCODED_ADDR = 0x9C, 0xF1

# opcode -> (name, operand kinds); the test's own statement of what the
# module must support.
SPEC = {
    ADDR: ("DW_OP_addr", ("addr",)), DEREF: ("DW_OP_deref", ()),
    CONST1U: ("DW_OP_const1u", ("u8",)), CONST1S: ("DW_OP_const1s", ("s8",)),
    CONST2U: ("DW_OP_const2u", ("u16",)), CONST2S: ("DW_OP_const2s", ("s16",)),
    CONST4U: ("DW_OP_const4u", ("u32",)), CONST4S: ("DW_OP_const4s", ("s32",)),
    CONST8U: ("DW_OP_const8u", ("u64",)), CONST8S: ("DW_OP_const8s", ("s64",)),
    CONSTU: ("DW_OP_constu", ("uleb",)), CONSTS: ("DW_OP_consts", ("sleb",)),
    DUP: ("DW_OP_dup", ()), DROP: ("DW_OP_drop", ()), OVER: ("DW_OP_over", ()),
    PICK: ("DW_OP_pick", ("u8",)), SWAP: ("DW_OP_swap", ()), ROT: ("DW_OP_rot", ()),
    ABS: ("DW_OP_abs", ()), AND: ("DW_OP_and", ()), DIV: ("DW_OP_div", ()),
    MINUS: ("DW_OP_minus", ()), MOD: ("DW_OP_mod", ()), MUL: ("DW_OP_mul", ()),
    NEG: ("DW_OP_neg", ()), NOT: ("DW_OP_not", ()), OR: ("DW_OP_or", ()),
    PLUS: ("DW_OP_plus", ()), PLUS_UCONST: ("DW_OP_plus_uconst", ("uleb",)),
    SHL: ("DW_OP_shl", ()), SHR: ("DW_OP_shr", ()), SHRA: ("DW_OP_shra", ()),
    XOR: ("DW_OP_xor", ()), BRA: ("DW_OP_bra", ("s16",)), EQ: ("DW_OP_eq", ()),
    GE: ("DW_OP_ge", ()), GT: ("DW_OP_gt", ()), LE: ("DW_OP_le", ()),
    LT: ("DW_OP_lt", ()), NE: ("DW_OP_ne", ()), SKIP: ("DW_OP_skip", ("s16",)),
    REGX: ("DW_OP_regx", ("uleb",)), BREGX: ("DW_OP_bregx", ("uleb", "sleb")),
    DEREF_SIZE: ("DW_OP_deref_size", ("u8",)), NOP: ("DW_OP_nop", ()),
    CALL_FRAME_CFA: ("DW_OP_call_frame_cfa", ()),
    GNU_ENCODED_ADDR: ("DW_OP_GNU_encoded_addr", ("enc",)),
}
for _n in range(32):
    SPEC[LIT0 + _n] = ("DW_OP_lit%d" % _n, ())
    SPEC[REG0 + _n] = ("DW_OP_reg%d" % _n, ())
    SPEC[BREG0 + _n] = ("DW_OP_breg%d" % _n, ("sleb",))


# --- encoders

from plugin.leb128 import encode_sleb as sleb, encode_uleb as uleb  # noqa: E402


def code(*parts):
    """Concatenate opcodes (ints) and operand bytes (bytes) into an expression."""
    return b"".join(bytes([p]) if isinstance(p, int) else p for p in parts)


def le(fmt, value):
    return struct.pack("<" + fmt, value)


def be(fmt, value):
    return struct.pack(">" + fmt, value)


# --- a fake frame

class Memory:
    """Readable memory from {address: bytes}; anything else is unreadable."""

    def __init__(self, chunks=None):
        self.chunks = dict(chunks or {})
        self.calls = []

    def __call__(self, address, size):
        self.calls.append((address, size))
        for start, data in self.chunks.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise MemoryReadError(address, size)


REGS = {n: 0x1000 + n for n in range(40)}
REGS.update({7: 0x7FFC0000, 16: 0x401020, 128: 0xABC})


def ev(expression, arch=X86, regs=REGS, mem=None, **kw):
    return evaluate(expression, arch=arch, read_register=regs.get,
                    read_memory=mem if mem is not None else Memory(), **kw)


def value(expression, arch=X86, **kw):
    return ev(expression, arch, **kw).value


def stack(expression, depth, arch=X86, **kw):
    """The top `depth` stack values (bottom first), found by dropping one more each time."""
    tops = [value(expression + bytes([DROP]) * k, arch, **kw) for k in range(depth)]
    return tops[::-1]


def decode_error(expression, arch=X86, **kw):
    with pytest.raises(DecodeError) as info:
        ev(expression, arch, **kw)
    assert info.value.section == "DWARF expression"
    return info.value


# ===========================================================================
# Coverage of the op table


def test_module_supports_exactly_the_spec():
    assert set(dwarf_expr.OPS) == set(SPEC)
    for opcode, (name, _) in SPEC.items():
        assert dwarf_expr.OPS[opcode].name == name


# --- constants

@pytest.mark.parametrize("arch, expr, expected", [
    (X86, code(ADDR, le("Q", 0x1122334455667788)), 0x1122334455667788),
    (I386, code(ADDR, le("I", 0x80001234)), 0x80001234),
    (S390X, code(ADDR, be("Q", 0x0102030405060708)), 0x0102030405060708),
    (X86, code(CONST1U, b"\xff"), 0xFF),
    (X86, code(CONST1S, b"\xff"), M64),                    # -1
    (X86, code(CONST1S, b"\x7f"), 0x7F),
    (I386, code(CONST1S, b"\x80"), (-128) & M32),
    (X86, code(CONST2U, le("H", 0xFFFE)), 0xFFFE),
    (S390X, code(CONST2U, b"\x01\x02"), 0x0102),           # big-endian operand
    (X86, code(CONST2S, le("h", -2)), (-2) & M64),
    (X86, code(CONST2S, le("h", 0x7FFF)), 0x7FFF),
    (X86, code(CONST4U, le("I", 0xDEADBEEF)), 0xDEADBEEF),
    (X86, code(CONST4S, le("i", -0x10)), (-0x10) & M64),
    (I386, code(CONST4S, le("i", -0x10)), (-0x10) & M32),
    (S390X, code(CONST4S, be("i", -3)), (-3) & M64),
    (X86, code(CONST8U, le("Q", M64)), M64),
    (I386, code(CONST8U, le("Q", 0x1122334455667788)), 0x55667788),   # wraps to 32 bits
    (X86, code(CONST8S, le("q", -(1 << 63))), 1 << 63),
    (X86, code(CONSTU, b"\xe5\x8e\x26"), 624485),
    (X86, code(CONSTU, uleb(M64)), M64),
    (X86, code(CONSTU, uleb((1 << 70) + 5)), 5),             # wider than 64 bits: wraps
    (I386, code(CONSTU, uleb(0x1_0000_0007)), 7),
    (X86, code(CONSTS, b"\xc0\xbb\x78"), (-123456) & M64),
    (X86, code(CONSTS, sleb(-1)), M64),
    (I386, code(CONSTS, sleb(-2)), M32 - 1),
    (X86, code(CONSTS, sleb(63)), 63),
    (X86, code(CONSTS, sleb(64)), 64),
])
def test_constants(arch, expr, expected):
    result = ev(expr, arch)
    assert result == Evaluation(expected, [], [])


@pytest.mark.parametrize("n", range(32))
def test_lit(n):
    assert value(code(LIT0 + n)) == n


# --- stack manipulation

def test_dup():
    assert stack(code(LIT0 + 5, LIT0 + 7, DUP), 3) == [5, 7, 7]


def test_drop():
    assert stack(code(LIT0 + 5, LIT0 + 7, DROP), 1) == [5]


def test_over():
    assert stack(code(LIT0 + 1, LIT0 + 2, OVER), 3) == [1, 2, 1]


@pytest.mark.parametrize("index, expected", [(0, 4), (1, 3), (3, 1)])
def test_pick(index, expected):
    base = code(LIT0 + 1, LIT0 + 2, LIT0 + 3, LIT0 + 4)
    assert stack(base + code(PICK, bytes([index])), 5) == [1, 2, 3, 4, expected]


def test_swap():
    assert stack(code(LIT0 + 1, LIT0 + 2, SWAP), 2) == [2, 1]


def test_rot():
    # DWARF: the top becomes the third, the second becomes the top, the third the second
    assert stack(code(LIT0 + 9, LIT0 + 1, LIT0 + 2, LIT0 + 3, ROT), 4) == [9, 3, 1, 2]


def test_nop():
    assert value(code(LIT0 + 4, NOP, NOP)) == 4


# --- memory

def test_deref_x86():
    mem = Memory({0x5000: le("Q", 0x1122334455667788) + le("Q", 0x99)})
    result = ev(code(CONST2U, le("H", 0x5000), DEREF), mem=mem)
    assert result.value == 0x1122334455667788
    assert result.reads == [(0x5000, 8, 0x1122334455667788)]


def test_deref_i386_reads_four_bytes():
    mem = Memory({0x5000: le("I", 0xCAFEF00D)})
    result = ev(code(CONST2U, le("H", 0x5000), DEREF), I386, mem=mem)
    assert result.value == 0xCAFEF00D
    assert result.reads == [(0x5000, 4, 0xCAFEF00D)]


def test_deref_big_endian():
    mem = Memory({0x5000: be("Q", 0x0102030405060708)})
    result = ev(code(CONST2U, be("H", 0x5000), DEREF), S390X, mem=mem)
    assert result.value == 0x0102030405060708


def test_deref_chain_records_every_read_in_order():
    mem = Memory({0x5000: le("Q", 0x6000), 0x6000: le("Q", 0x7000)})
    result = ev(code(CONST2U, le("H", 0x5000), DEREF, DEREF), mem=mem)
    assert result.value == 0x7000
    assert result.reads == [(0x5000, 8, 0x6000), (0x6000, 8, 0x7000)]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8])
def test_deref_size_zero_extends(size):
    mem = Memory({0x5000: bytes(range(0xF1, 0xF9))})
    result = ev(code(CONST2U, le("H", 0x5000), DEREF_SIZE, bytes([size])), mem=mem)
    expected = int.from_bytes(bytes(range(0xF1, 0xF1 + size)), "little")
    assert result.value == expected
    assert result.reads == [(0x5000, size, expected)]


def test_deref_size_big_endian():
    mem = Memory({0x5000: b"\x12\x34\x56\x78"})
    assert value(code(CONST2U, be("H", 0x5000), DEREF_SIZE, b"\x02"), S390X, mem=mem) == 0x1234


# --- arithmetic and logic, with wraparound and signs

MIN64 = 1 << 63
MAX64 = MIN64 - 1


def c8(v):
    return code(CONST8U, le("Q", v & M64))


def c4(v):
    return code(CONST4U, le("I", v & M32))


@pytest.mark.parametrize("arch, expr, expected", [
    # abs is signed
    (X86, code(CONSTS, sleb(-5), ABS), 5),
    (X86, code(LIT0 + 5, ABS), 5),
    (X86, c8(MIN64) + code(ABS), MIN64),                   # |min| wraps to min
    (I386, code(CONSTS, sleb(-7), ABS), 7),
    (I386, c4(0x80000000) + code(ABS), 0x80000000),
    (X86, c4(0x80000000) + code(ABS), 0x80000000),         # positive in 64 bits
    # and / or / xor
    (X86, code(CONST1U, b"\xf0", CONST1U, b"\x3c", AND), 0x30),
    (X86, code(CONST1U, b"\xf0", CONST1U, b"\x0f", OR), 0xFF),
    (X86, code(CONST1U, b"\xff", CONST1U, b"\x0f", XOR), 0xF0),
    (X86, code(CONSTS, sleb(-1), LIT0 + 1, XOR), M64 - 1),
    # plus / minus / mul / plus_uconst wrap
    (X86, code(LIT0 + 2, LIT0 + 3, PLUS), 5),
    (X86, code(CONSTS, sleb(-1), LIT0 + 2, PLUS), 1),
    (I386, code(CONSTS, sleb(-1), LIT0 + 2, PLUS), 1),
    (X86, code(LIT0 + 3, LIT0 + 5, MINUS), M64 - 1),       # 3 - 5 = -2
    (I386, code(LIT0, LIT0 + 1, MINUS), M32),
    (X86, code(LIT0 + 10, LIT0 + 3, MINUS), 7),
    (X86, code(LIT0 + 6, LIT0 + 7, MUL), 42),
    (X86, c8(1 << 62) + code(LIT0 + 8, MUL), 0),           # 2**65 wraps to 0
    (X86, code(CONSTS, sleb(-3), LIT0 + 4, MUL), (-12) & M64),
    (I386, c4(0x10001) + c4(0x10001) + code(MUL), 0x20001),
    (X86, code(LIT0 + 1, PLUS_UCONST, uleb(128)), 129),
    (X86, code(CONSTS, sleb(-1), PLUS_UCONST, uleb(2)), 1),
    (I386, c4(0xFFFFFFF0) + code(PLUS_UCONST, uleb(0x20)), 0x10),
    # neg / not
    (X86, code(LIT0 + 1, NEG), M64),
    (X86, code(LIT0, NEG), 0),
    (X86, code(CONSTS, sleb(-9), NEG), 9),
    (I386, code(LIT0 + 1, NEG), M32),
    (X86, code(LIT0, NOT), M64),
    (I386, code(LIT0, NOT), M32),
    (X86, code(CONST1U, b"\x0f", NOT), M64 ^ 0xF),
    # div is signed, truncating toward zero
    (X86, code(LIT0 + 7, LIT0 + 2, DIV), 3),
    (X86, code(CONSTS, sleb(-7), LIT0 + 2, DIV), (-3) & M64),
    (X86, code(LIT0 + 7, CONSTS, sleb(-2), DIV), (-3) & M64),
    (X86, code(CONSTS, sleb(-8), CONSTS, sleb(-2), DIV), 4),
    (X86, c8(MIN64) + code(CONSTS, sleb(-1), DIV), MIN64),  # overflow wraps
    (I386, code(CONSTS, sleb(-7), LIT0 + 2, DIV), (-3) & M32),
    (I386, c4(0xFFFFFFFE) + code(LIT0 + 2, DIV), M32),      # -2 / 2 = -1 in 32 bits
    (X86, c4(0xFFFFFFFE) + code(LIT0 + 2, DIV), 0x7FFFFFFF),  # but positive in 64 bits
    # mod is unsigned
    (X86, code(LIT0 + 7, LIT0 + 3, MOD), 1),
    (X86, code(CONSTS, sleb(-1), LIT0 + 10, MOD), M64 % 10),
    (I386, code(CONSTS, sleb(-1), LIT0 + 10, MOD), M32 % 10),
    # shifts
    (X86, code(LIT0 + 1, LIT0 + 3, SHL), 8),
    (X86, code(LIT0 + 1, CONST1U, b"\x3f", SHL), 1 << 63),
    (X86, code(LIT0 + 3, CONST1U, b"\x3f", SHL), 1 << 63),  # the high bit falls off
    (X86, code(LIT0 + 1, CONST1U, b"\x40", SHL), 0),
    (X86, code(LIT0 + 1) + c8(M64) + code(SHL), 0),         # huge count, no huge int
    (I386, code(LIT0 + 1, LIT0 + 31, SHL), 1 << 31),
    (I386, code(LIT0 + 1, CONST1U, b"\x20", SHL), 0),
    (X86, code(CONSTS, sleb(-1), LIT0 + 4, SHR), M64 >> 4),
    (I386, code(CONSTS, sleb(-1), LIT0 + 4, SHR), M32 >> 4),
    (X86, code(CONSTS, sleb(-1), CONST1U, b"\x40", SHR), 0),
    (X86, code(CONSTS, sleb(-16), LIT0 + 2, SHRA), (-4) & M64),
    (X86, code(CONST1U, b"\x40", LIT0 + 2, SHRA), 0x10),
    (X86, code(CONSTS, sleb(-16), CONST1U, b"\xc8", SHRA), M64),   # count 200: sign fill
    (X86, code(CONST1U, b"\x40", CONST1U, b"\xc8", SHRA), 0),
    (I386, code(CONSTS, sleb(-16), LIT0 + 2, SHRA), (-4) & M32),
    (X86, c4(0x80000000) + code(LIT0 + 4, SHRA), 0x08000000),  # not negative in 64 bits
    (I386, c4(0x80000000) + code(LIT0 + 4, SHRA), 0xF8000000),
])
def test_arithmetic(arch, expr, expected):
    assert value(expr, arch) == expected


# --- comparisons: eq/ne on the bits, the others signed

CMP_PAIRS = [(0, 0), (1, 2), (2, 1), (-1, 0), (0, -1), (-1, -1),
             (-(1 << 63), (1 << 63) - 1), ((1 << 63) - 1, -(1 << 63)), (-5, -3)]
CMP_OPS = [(EQ, lambda a, b: a == b), (NE, lambda a, b: a != b), (GE, lambda a, b: a >= b),
           (GT, lambda a, b: a > b), (LE, lambda a, b: a <= b), (LT, lambda a, b: a < b)]


@pytest.mark.parametrize("a, b", CMP_PAIRS)
@pytest.mark.parametrize("opcode, test", CMP_OPS)
def test_comparisons_64(opcode, test, a, b):
    assert value(c8(a) + c8(b) + code(opcode)) == int(test(a, b))


@pytest.mark.parametrize("a, b", [(-1, 0), (0, -1), (-(1 << 31), (1 << 31) - 1), (7, 7), (3, -3)])
@pytest.mark.parametrize("opcode, test", CMP_OPS)
def test_comparisons_32(opcode, test, a, b):
    assert value(c4(a) + c4(b) + code(opcode), I386) == int(test(a, b))


def test_unsigned_looking_operands_compare_signed():
    # 0xffff...ff is -1: less than 0 for lt, though larger unsigned
    assert value(code(CONSTS, sleb(-1), LIT0, LT)) == 1
    assert value(code(CONST8U, le("Q", M64), CONSTS, sleb(-1), EQ)) == 1


# --- control flow

def test_skip_forward():
    expr = code(LIT0 + 1, SKIP, le("h", 1), LIT0 + 2, LIT0 + 3)
    assert stack(expr, 2) == [1, 3]


def test_skip_to_the_very_end_ends():
    assert value(code(LIT0 + 7, SKIP, le("h", 2), 0xFF, 0xFF)) == 7


def test_skip_zero_is_a_no_op():
    assert value(code(LIT0 + 7, SKIP, le("h", 0))) == 7


def test_bra_taken_pops_the_condition():
    expr = code(LIT0 + 7, LIT0 + 1, BRA, le("h", 1), LIT0 + 2)
    assert stack(expr, 1) == [7]
    assert value(expr + code(DROP, LIT0 + 9)) == 9     # only 7 was left under it


def test_bra_not_taken():
    expr = code(LIT0 + 7, LIT0, BRA, le("h", 1), LIT0 + 2)
    assert stack(expr, 2) == [7, 2]


def test_bra_condition_is_any_nonzero_value():
    expr = code(LIT0 + 7, CONSTS, sleb(-1), BRA, le("h", 1), LIT0 + 2)
    assert value(expr) == 7


def test_bra_not_taken_ignores_a_wild_target():
    # documented: the target is checked only when the branch is taken
    assert value(code(LIT0 + 7, LIT0, BRA, le("h", 1000))) == 7


def test_backward_loop_counts_down_and_steps_are_counted():
    # 0: lit3 | 1: lit1 | 2: minus | 3: dup | 4: bra -6 (to 1) | 7: end
    expr = code(LIT0 + 3, LIT0 + 1, MINUS, DUP, BRA, le("h", -6))
    assert value(expr) == 0
    assert value(expr, max_steps=13) == 0               # lit3 + 3 rounds of 4
    err = decode_error(expr, max_steps=12)
    assert err.offset == 4 and "step limit" in err.cause


def test_branch_into_the_middle_of_an_operation_decodes_from_there():
    # the skip lands on the operand byte of const1u, which is lit5 (0x35)
    expr = code(SKIP, le("h", 1), CONST1U, bytes([LIT0 + 5]))
    assert value(expr) == 5


# --- registers

@pytest.mark.parametrize("n", range(32))
def test_reg(n):
    result = ev(code(REG0 + n))
    assert result == Evaluation(REGS[n], [], [n])


@pytest.mark.parametrize("n", range(32))
def test_breg(n):
    assert ev(code(BREG0 + n, sleb(n + 1))) == Evaluation(REGS[n] + n + 1, [], [n])
    assert value(code(BREG0 + n, sleb(-(n + 1)))) == REGS[n] - n - 1


def test_breg_wraps():
    assert value(code(BREG0 + 7, sleb(-8)), regs={7: 4}) == (4 - 8) & M64
    assert value(code(BREG0 + 4, sleb(-8)), I386, regs={4: 4}) == (4 - 8) & M32
    assert value(code(BREG0 + 7, sleb(16)), regs={7: M64 - 7}) == 8


def test_breg_large_offsets():
    assert value(code(BREG0 + 7, sleb(1 << 40))) == REGS[7] + (1 << 40)
    assert value(code(BREG0 + 7, sleb(-(1 << 70)))) == (REGS[7] - (1 << 70)) & M64


def test_register_values_are_masked():
    assert value(code(REG0 + 1), I386, regs={1: 0x1_2345_6789}) == 0x2345_6789
    assert value(code(REG0 + 1), regs={1: -1}) == M64


def test_regx():
    assert ev(code(REGX, uleb(16))) == Evaluation(REGS[16], [], [16])
    assert ev(code(REGX, uleb(128))) == Evaluation(0xABC, [], [128])


def test_bregx():
    assert ev(code(BREGX, uleb(7), sleb(8))) == Evaluation(REGS[7] + 8, [], [7])
    assert value(code(BREGX, uleb(128), sleb(-1))) == 0xABB


def test_registers_used_in_first_use_order_without_repeats():
    expr = code(BREG0 + 16, sleb(0), BREG0 + 7, sleb(0), REG0 + 16, REGX, uleb(7), PLUS, PLUS, PLUS)
    assert ev(expr).registers_used == [16, 7]


def test_only_the_registers_asked_for_are_read():
    asked = []

    def read_register(n):
        asked.append(n)
        return 100
    evaluate(code(BREG0 + 6, sleb(8)), arch=X86, read_register=read_register, read_memory=Memory())
    assert asked == [6]


# --- CFA and the initial stack

def test_call_frame_cfa():
    assert value(code(CALL_FRAME_CFA, LIT0 + 16, MINUS), cfa=0x7FFC0100) == 0x7FFC00F0


def test_initial_stack_is_pushed_first_in_order():
    # DW_CFA_expression style: the caller pushes the CFA, the expression adds to it
    assert value(code(PLUS_UCONST, uleb(8)), initial_stack=(0x7000,)) == 0x7008
    assert stack(b"", 2, initial_stack=(1, 2)) == [1, 2]
    assert value(code(MINUS), initial_stack=(10, 3)) == 7


def test_initial_stack_alone_is_the_value():
    assert ev(b"", initial_stack=(0x1234,)) == Evaluation(0x1234, [], [])


def test_initial_stack_is_masked():
    assert value(b"", I386, initial_stack=(-1,)) == M32


def test_dw_cfa_expression_style_deref_of_saved_slot():
    # rbp saved at [CFA-16]: the rule's expression is "lit16 minus", the
    # caller derefs the address; val_expression style derefs inside.
    mem = Memory({0x7FF0: le("Q", 0xFEED)})
    assert value(code(LIT0 + 16, MINUS), initial_stack=(0x8000,)) == 0x7FF0
    result = ev(code(LIT0 + 16, MINUS, DEREF), initial_stack=(0x8000,), mem=mem)
    assert result == Evaluation(0xFEED, [(0x7FF0, 8, 0xFEED)], [])


# --- DW_OP_GNU_encoded_addr

@pytest.mark.parametrize("encoding, field, expected", [
    (0x00, le("Q", 0x1122334455667788), 0x1122334455667788),   # absptr
    (0x01, uleb(300), 300),                                    # uleb128
    (0x02, le("H", 0xFFFF), 0xFFFF),                           # udata2
    (0x03, le("I", 0xFFFFFFF0), 0xFFFFFFF0),                   # udata4
    (0x04, le("Q", M64), M64),                                 # udata8
    (0x09, sleb(-2), M64 - 1),                                 # sleb128
    (0x0A, le("h", -2), M64 - 1),                              # sdata2
    (0x0B, le("i", -16), (-16) & M64),                         # sdata4
    (0x0C, le("q", -1), M64),                                  # sdata8
])
def test_encoded_addr_formats(encoding, field, expected):
    assert ev(code(GNU_ENCODED_ADDR, bytes([encoding]), field)) == Evaluation(expected, [], [])


def test_encoded_addr_after_other_ops_and_before_more():
    expr = code(LIT0 + 1, GNU_ENCODED_ADDR, b"\x03", le("I", 0x40), PLUS)
    assert value(expr) == 0x41


def test_encoded_addr_i386_absptr_is_four_bytes():
    assert value(code(GNU_ENCODED_ADDR, b"\x00", le("I", 0x8048000), LIT0 + 1, PLUS), I386) == 0x8048001


def test_encoded_addr_pcrel_is_relative_to_the_field():
    # op at 0x400000, encoding byte at +1, the sdata4 field at +2
    expr = code(GNU_ENCODED_ADDR, b"\x1b", le("i", -0x10))
    assert value(expr, bases={"expression": 0x400000}) == 0x400002 - 0x10
    expr = code(NOP, GNU_ENCODED_ADDR, b"\x1b", le("i", 0x100))
    assert value(expr, bases={"expression": 0x400000}) == 0x400003 + 0x100


@pytest.mark.parametrize("encoding, key", [(0x23, "text"), (0x33, "data"), (0x43, "func")])
def test_encoded_addr_relative_bases(encoding, key):
    bases = {"text": 0x10000, "data": 0x20000, "func": 0x30000}
    expr = code(GNU_ENCODED_ADDR, bytes([encoding]), le("I", 0x44))
    assert value(expr, bases=bases) == bases[key] + 0x44


def test_encoded_addr_aligned():
    # expression at 0x1001: op 0x1001, encoding 0x1002, field padded from 0x1003 to 0x1008
    expr = code(GNU_ENCODED_ADDR, b"\x50", bytes(5), le("Q", 0xAABBCCDD))
    assert value(expr, bases={"expression": 0x1001}) == 0xAABBCCDD


def test_encoded_addr_indirect_reads_through_memory():
    mem = Memory({0x6000: le("Q", 0xC0FFEE)})
    result = ev(code(GNU_ENCODED_ADDR, b"\x83", le("I", 0x6000)), mem=mem)
    assert result == Evaluation(0xC0FFEE, [(0x6000, 8, 0xC0FFEE)], [])


def test_encoded_addr_indirect_unreadable_is_a_memory_error():
    with pytest.raises(MemoryReadError):
        ev(code(GNU_ENCODED_ADDR, b"\x83", le("I", 0x6000)))


@pytest.mark.parametrize("encoding, field, bases, words", [
    (0x23, le("I", 1), {}, "text"),                     # base not known
    (0x1b, le("i", 1), {}, "expression"),               # pcrel without the address
    (0x50, le("Q", 1), {}, "expression"),               # aligned without the address
    (0xFF, b"", {}, "omit"),
    (0x05, le("I", 1), {}, "unknown pointer encoding"),
    (0x73, le("I", 1), {}, "application"),
    (0x03, b"\x01\x02", {}, "past the end"),            # truncated field
])
def test_encoded_addr_errors(encoding, field, bases, words):
    err = decode_error(code(LIT0, GNU_ENCODED_ADDR, bytes([encoding]), field), bases=bases)
    assert err.offset == 1
    assert words in err.cause


# ===========================================================================
# The PLT expression

# What binutils ld writes for .plt (and the form in the reference's text):
# DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
# DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
PLT_LD = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
# The reference write-up's serialised bytes for the same computation:
# bregx(7, 8); regx(16); const1u 15; and; const1u 11; ge; const1u 3; shl; plus
PLT_REFERENCE = bytes([0x92, 0x07, 0x08, 0x90, 0x10, 0x08, 0x0F, 0x1A,
                       0x08, 0x0B, 0x2A, 0x08, 0x03, 0x24, 0x22])

PLT_TEXT = ("DW_OP_breg7 (rsp) +8; DW_OP_breg16 (rip) +0; DW_OP_lit15; DW_OP_and; "
            "DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus")


@pytest.mark.parametrize("expr", [PLT_LD, PLT_REFERENCE], ids=["ld", "reference"])
@pytest.mark.parametrize("entry", [0x401020, 0x401030, 0x401ff0, 0x7F0012345670, 0x1000])
@pytest.mark.parametrize("offset, extra", [(0, 8), (6, 8), (10, 8), (11, 16), (12, 16), (15, 16)])
def test_plt_expression(expr, entry, offset, extra):
    rsp = 0x7FFE_1000
    result = ev(expr, regs={7: rsp, 16: entry + offset})
    assert result == Evaluation(rsp + extra, [], [7, 16])


def test_plt_disassembly():
    assert disassemble(PLT_LD, X86) == PLT_TEXT
    assert disassemble(PLT_REFERENCE, X86) == (
        "DW_OP_bregx 7 (rsp) +8; DW_OP_regx 16 (rip); DW_OP_const1u 15; DW_OP_and; "
        "DW_OP_const1u 11; DW_OP_ge; DW_OP_const1u 3; DW_OP_shl; DW_OP_plus")


# ===========================================================================
# Errors: always DecodeError("DWARF expression", offset of the op, cause)

@pytest.mark.parametrize("expr, offset, words", [
    # bad bytecode / unknown opcode
    (code(LIT0 + 1, LIT0 + 2, 0xFF), 2, "unknown opcode 0xff"),
    (code(0x00), 0, "unknown opcode 0x00"),
    (code(LIT0, 0x9F), 1, "DW_OP_stack_value"),
    (code(LIT0, 0x93, 0x08), 1, "DW_OP_piece"),
    (code(LIT0, CONST1U), 1, "past the end"),
    (code(CONST4U, b"\x01\x02"), 0, "past the end"),
    (code(LIT0, ADDR, bytes(7)), 1, "past the end"),
    (code(CONSTU, b"\x80\x80"), 0, "LEB128"),
    (code(LIT0, BREG0 + 7), 1, "LEB128"),
    (code(BREGX, uleb(7)), 0, "LEB128"),
    (code(LIT0, SKIP, b"\x01"), 1, "past the end"),
    (code(LIT0, DEREF_SIZE), 1, "past the end"),
    # stack underflow
    (code(DROP), 0, "underflow"),
    (code(DUP), 0, "underflow"),
    (code(LIT0 + 1, PLUS), 1, "underflow"),
    (code(LIT0, LIT0, ROT), 2, "underflow"),
    (code(LIT0, OVER), 1, "underflow"),
    (code(LIT0, SWAP), 1, "underflow"),
    (code(LIT0, LIT0, PICK, b"\x02"), 2, "DW_OP_pick"),
    (code(LIT0, PICK, b"\xff"), 1, "DW_OP_pick"),
    (code(NEG), 0, "underflow"),
    (code(DEREF), 0, "underflow"),
    (code(DEREF_SIZE, b"\x01"), 0, "underflow"),
    (code(LIT0, DROP, DEREF_SIZE, b"\x01"), 2, "underflow"),
    (code(PLUS_UCONST, b"\x01"), 0, "underflow"),
    (code(BRA, le("h", 0)), 0, "underflow"),
    # division by zero
    (code(LIT0 + 1, LIT0, DIV), 2, "division by zero"),
    (code(LIT0 + 1, LIT0, MOD), 2, "division by zero"),
    # branch target outside
    (code(LIT0, SKIP, le("h", 100)), 1, "outside"),
    (code(LIT0, SKIP, le("h", -5)), 1, "outside"),
    (code(LIT0, SKIP, le("h", 1)), 1, "outside"),          # one past the end
    (code(LIT0 + 1, BRA, le("h", 10), LIT0), 1, "outside"),
    (code(LIT0, LIT0 + 1, BRA, le("h", -6)), 2, "outside"),     # to -1
    # deref_size out of range
    (code(LIT0, DEREF_SIZE, b"\x00"), 1, "size"),
    (code(LIT0, DEREF_SIZE, b"\x09"), 1, "size"),
    # empty stack at the end
    (b"", 0, "empty"),
    (code(LIT0, DROP), 2, "empty"),
    (code(NOP, NOP), 2, "empty"),
    (code(LIT0 + 1, BRA, le("h", 1), NOP), 5, "empty"),          # jumps to the end
    # call_frame_cfa without a CFA
    (code(LIT0, CALL_FRAME_CFA), 1, "CFA"),
])
def test_errors(expr, offset, words):
    err = decode_error(expr, mem=Memory({0: bytes(16)}))
    assert err.offset == offset, err
    assert words in err.cause, err


def test_deref_size_larger_than_the_address_is_refused_on_i386():
    err = decode_error(code(LIT0, DEREF_SIZE, b"\x08"), I386)
    assert err.offset == 1 and "1..4" in err.cause


@pytest.mark.parametrize("expr, offset", [
    (code(BREG0 + 6, sleb(8)), 0),
    (code(LIT0, REG0 + 3), 1),
    (code(LIT0, LIT0, REGX, uleb(99)), 2),
    (code(BREGX, uleb(1000), sleb(0)), 0),
])
def test_register_without_a_value(expr, offset):
    err = decode_error(expr, regs={7: 1})
    assert err.offset == offset
    assert "no known value" in err.cause


def test_register_error_names_the_register():
    err = decode_error(code(BREG0 + 6, sleb(0)), regs={})
    assert "rbp" in err.cause


def test_stack_overflow_at_the_default_limit():
    expr = code(LIT0) + bytes([DUP]) * 300
    err = decode_error(expr)
    assert err.offset == 256 and "overflow" in err.cause      # the 257th value
    assert value(code(LIT0) + bytes([DUP]) * 255) == 0         # 256 values fit


def test_stack_overflow_at_a_small_limit():
    err = decode_error(code(LIT0, LIT0, LIT0), max_stack=2)
    assert err.offset == 2


def test_initial_stack_over_the_limit():
    err = decode_error(code(LIT0), initial_stack=(1, 2, 3), max_stack=2)
    assert err.offset == 0 and "overflow" in err.cause


def test_skip_to_itself_hits_the_step_limit_fast():
    expr = code(LIT0, SKIP, le("h", -3))          # the skip jumps back to its own offset
    started = time.perf_counter()
    err = decode_error(expr)
    elapsed = time.perf_counter() - started
    assert err.offset == 1 and "step limit" in err.cause
    assert elapsed < 1.0


def test_step_limit_counts_operations_run():
    assert value(code(NOP) * 4 + code(LIT0), max_steps=5) == 0
    err = decode_error(code(NOP) * 4 + code(LIT0), max_steps=4)
    assert err.offset == 4


def test_memory_errors_pass_through_untouched():
    with pytest.raises(MemoryReadError) as info:
        ev(code(CONST2U, le("H", 0x9000), DEREF))
    assert info.value.address == 0x9000 and info.value.size == 8
    with pytest.raises(MemoryReadError):
        ev(code(LIT0, DEREF_SIZE, b"\x04"))


def test_short_read_is_a_memory_error():
    with pytest.raises(MemoryReadError):
        ev(code(LIT0 + 8, DEREF), mem=lambda address, size: b"\x00" * (size - 1))


def test_error_message_carries_section_and_offset():
    err = decode_error(code(LIT0, LIT0, 0xFF))
    assert str(err).startswith("DWARF expression+0x2: ")


# ===========================================================================
# Disassembly

def sample_operands(kinds, arch):
    out = b""
    for kind in kinds:
        out += {"addr": b"\x10" * arch.address_size, "u8": b"\x04", "s8": b"\xfc",
                "u16": le("H", 300), "s16": le("h", -2), "u32": le("I", 7),
                "s32": le("i", -7), "u64": le("Q", 9), "s64": le("q", -9),
                "uleb": uleb(130), "sleb": sleb(-130), "enc": b"\x03" + le("I", 0x1234)}[kind]
    return out


@pytest.mark.parametrize("opcode", sorted(SPEC))
def test_every_op_disassembles_by_name(opcode):
    name, kinds = SPEC[opcode]
    text = disassemble(code(opcode, sample_operands(kinds, X86), LIT0 + 1), X86)
    first, last = text.split("; ")
    assert first == name or first.startswith(name + " ")
    assert last == "DW_OP_lit1"


@pytest.mark.parametrize("expr, text", [
    (b"", ""),
    (code(BREG0 + 6, sleb(-16)), "DW_OP_breg6 (rbp) -16"),
    (code(REG0 + 7), "DW_OP_reg7 (rsp)"),
    (code(REGX, uleb(16)), "DW_OP_regx 16 (rip)"),
    (code(BREGX, uleb(128), sleb(-1)), "DW_OP_bregx 128 (r128) -1"),
    (code(ADDR, le("Q", 0x401000)), "DW_OP_addr 0x401000"),
    (code(CONST1S, b"\xff"), "DW_OP_const1s -1"),
    (code(CONST8U, le("Q", M64)), "DW_OP_const8u 0xffffffffffffffff"),
    (code(CONSTS, sleb(-8)), "DW_OP_consts -8"),
    (code(PLUS_UCONST, uleb(16)), "DW_OP_plus_uconst 16"),
    (code(DEREF_SIZE, b"\x04"), "DW_OP_deref_size 4"),
    (code(PICK, b"\x01"), "DW_OP_pick 1"),
    (code(LIT0, SKIP, le("h", -3)), "DW_OP_lit0; DW_OP_skip -3 (to 0x1)"),
    (code(BRA, le("h", 2)), "DW_OP_bra +2 (to 0x5)"),
    (code(SKIP, le("h", -16839)), "DW_OP_skip -16839 (to -0x41c4)"),
    (code(CALL_FRAME_CFA), "DW_OP_call_frame_cfa"),
    (code(GNU_ENCODED_ADDR, b"\x1b", le("i", -16)), "DW_OP_GNU_encoded_addr pcrel sdata4 -16"),
    (code(GNU_ENCODED_ADDR, b"\x9b", le("i", 0x10)), "DW_OP_GNU_encoded_addr indirect pcrel sdata4 16"),
    (code(GNU_ENCODED_ADDR, b"\x00", le("Q", 0x401000)), "DW_OP_GNU_encoded_addr absptr 0x401000"),
])
def test_disassembly_text(expr, text):
    assert disassemble(expr, X86) == text


def test_disassembly_uses_the_arch():
    assert disassemble(code(BREG0 + 4, sleb(4)), I386) == "DW_OP_breg4 (esp) +4"
    assert disassemble(code(BREG0 + 31, sleb(16)), AARCH64) == "DW_OP_breg31 (sp) +16"
    assert disassemble(code(ADDR, be("Q", 0x1000)), S390X) == "DW_OP_addr 0x1000"
    assert disassemble(code(ADDR, le("I", 0x8048000), LIT0), I386) == "DW_OP_addr 0x8048000; DW_OP_lit0"


def test_disassembly_of_aligned_pointer_needs_the_address():
    expr = code(GNU_ENCODED_ADDR, b"\x50", bytes(5), le("Q", 0xAB))
    assert disassemble(expr, X86).startswith("<bad: ")
    assert disassemble(expr, X86, address=0x1001) == "DW_OP_GNU_encoded_addr aligned absptr 171"


@pytest.mark.parametrize("expr, prefix, words", [
    (code(LIT0, 0xFF), "DW_OP_lit0; <bad: ", "unknown opcode 0xff at offset 0x1"),
    (code(LIT0, CONST4U, b"\x01"), "DW_OP_lit0; <bad: ", "DW_OP_const4u"),
    (code(CONSTU, b"\x80"), "<bad: ", "LEB128"),
    (code(0x9F), "<bad: ", "DW_OP_stack_value"),
    (code(GNU_ENCODED_ADDR, b"\x07"), "<bad: ", "format"),
])
def test_disassembly_of_bad_bytes(expr, prefix, words):
    text = disassemble(expr, X86)
    assert text.startswith(prefix) and text.endswith(">") and words in text


def test_disassembly_does_not_need_a_valid_program():
    # things only evaluation can reject still disassemble
    assert disassemble(code(PLUS, DEREF_SIZE, b"\x20", SKIP, le("h", 999)), X86) == \
        "DW_OP_plus; DW_OP_deref_size 32; DW_OP_skip +999 (to 0x3ed)"


# ===========================================================================
# Models: random operands against the semantics stated independently

def to_signed(value, bits):
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def model(opcode, a, b, bits):
    """The DWARF binary ops as stated in the brief; None when it must fail."""
    mask = (1 << bits) - 1
    sa, sb = to_signed(a, bits), to_signed(b, bits)
    if opcode == DIV:
        return None if b == 0 else int(Fraction(sa, sb)) & mask   # int() truncates toward 0
    if opcode == MOD:
        return None if b == 0 else a % b
    if opcode == SHL:
        return (a * 2 ** b) & mask if b < bits else 0
    if opcode == SHR:
        return a // 2 ** b if b < bits else 0
    if opcode == SHRA:
        return (Fraction(sa, 2 ** min(b, bits)).__floor__()) & mask
    return {
        AND: a & b, OR: a | b, XOR: a ^ b, PLUS: (a + b) & mask, MINUS: (a - b) & mask,
        MUL: (a * b) & mask, EQ: int(a == b), NE: int(a != b), GE: int(sa >= sb),
        GT: int(sa > sb), LE: int(sa <= sb), LT: int(sa < sb),
    }[opcode]


BINARY = [AND, OR, XOR, PLUS, MINUS, MUL, DIV, MOD, SHL, SHR, SHRA, EQ, NE, GE, GT, LE, LT]
edge64 = st.one_of(st.integers(0, M64), st.sampled_from([0, 1, 2, 63, 64, 65, MIN64, MAX64, M64, M64 - 1]))
edge32 = st.one_of(st.integers(0, M32), st.sampled_from([0, 1, 2, 31, 32, 33, 1 << 31, M32 >> 1, M32]))


def check_binary_op(opcode, a, b, bits):
    """Push a and b as unsigned constants of the address size, apply opcode, compare with the model."""
    const, fmt, arch, at_operator = (CONST8U, "Q", X86, 18) if bits == 64 else (CONST4U, "I", I386, 10)
    expr = code(const, le(fmt, a), const, le(fmt, b), opcode)
    expected = model(opcode, a, b, bits)
    if expected is None:
        assert decode_error(expr, arch).offset == at_operator
    else:
        assert value(expr, arch) == expected


@settings(max_examples=400)
@given(st.sampled_from(BINARY), edge64, edge64)
def test_binary_ops_match_the_model_64(opcode, a, b):
    check_binary_op(opcode, a, b, 64)


@settings(max_examples=400)
@given(st.sampled_from(BINARY), edge32, edge32)
def test_binary_ops_match_the_model_32(opcode, a, b):
    check_binary_op(opcode, a, b, 32)


@given(st.sampled_from([(X86, 64), (I386, 32)]), st.integers(-(1 << 80), 1 << 80))
def test_unary_ops_match_the_model(arch_bits, a):
    arch, bits = arch_bits
    mask = (1 << bits) - 1
    push = code(CONSTS, sleb(a))
    a &= mask
    assert value(push + code(NEG), arch) == -a & mask
    assert value(push + code(NOT), arch) == ~a & mask
    assert value(push + code(ABS), arch) == abs(to_signed(a, bits)) & mask
    assert value(push, arch) == a


# ===========================================================================
# Random input: only DecodeError / MemoryReadError, always terminates

def fake_frame(data):
    """Registers and memory that may or may not be readable."""
    known = data.draw(st.dictionaries(st.integers(0, 140), st.integers(0, M64), max_size=12))
    unknown = data.draw(st.sets(st.integers(0, 140), max_size=3))
    fill = data.draw(st.integers(0, M64))
    unreadable = data.draw(st.integers(0, 3))

    def read_register(number):
        if number in unknown:
            return None
        return known.get(number, fill + number)

    def read_memory(address, size):
        if (address >> 3) % 4 == unreadable or size > 8:
            raise MemoryReadError(address, size)
        return bytes((address * 131 + i) & 0xFF for i in range(size))
    return read_register, read_memory


def valid_op_chunk():
    """An opcode the module knows followed by random bytes (often its operands)."""
    return st.tuples(st.sampled_from(sorted(SPEC)), st.binary(max_size=4)).map(
        lambda t: bytes([t[0]]) + t[1][:t[0] % 5])


programs = st.one_of(
    st.binary(max_size=64),
    st.lists(valid_op_chunk(), max_size=40).map(b"".join),
    st.lists(st.sampled_from(sorted(SPEC)), max_size=40).map(bytes),
)


def check_random_evaluation(data, expression):
    read_register, read_memory = fake_frame(data)
    arch = data.draw(st.sampled_from(ALL_ARCHES))
    initial = data.draw(st.lists(st.integers(0, M64), max_size=3))
    cfa = data.draw(st.one_of(st.none(), st.integers(0, M64)))
    bases = data.draw(st.one_of(st.none(), st.fixed_dictionaries(
        {"text": st.integers(0, M64), "data": st.integers(0, M64),
         "func": st.integers(0, M64), "expression": st.integers(0, M64)})))
    started = time.perf_counter()
    try:
        result = evaluate(expression, arch=arch, read_register=read_register,
                          read_memory=read_memory, initial_stack=initial, cfa=cfa,
                          bases=bases, max_steps=2000, max_stack=64)
    except DecodeError as err:
        assert err.section == "DWARF expression"
        assert 0 <= err.offset <= len(expression)
        event("DecodeError: " + re.sub(r"[0-9]+|0x[0-9a-f]+|DW_OP_\w+|r\w+ \(", "", err.cause)[:30])
    except MemoryReadError:
        event("MemoryReadError")
    else:
        event("value")
        assert 0 <= result.value <= arch.mask
        for address, size, got in result.reads:
            assert 1 <= size <= arch.address_size and 0 <= got < 1 << (8 * size)
    assert time.perf_counter() - started < 5


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), programs)
def test_random_evaluation_raises_only_the_two_errors(data, expression):
    check_random_evaluation(data, expression)


loop_parts = st.one_of(
    st.sampled_from([LIT0, LIT0 + 1, DUP, DROP, NOP, NOT, 0xFF]).map(lambda b: bytes([b])),
    st.tuples(st.sampled_from([SKIP, BRA]), st.integers(-12, 6)).map(lambda t: bytes([t[0]]) + le("h", t[1])),
    st.integers(-16, -4).map(lambda k: bytes([LIT0 + 1, BRA]) + le("h", k)),   # always taken
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(loop_parts, min_size=1, max_size=12).map(b"".join))
def test_random_loops_terminate(data, expression):
    # dense in short backward skip/bra, so loops (and the step limit) are common
    check_random_evaluation(data, expression)


@settings(max_examples=500)
@given(st.sampled_from(ALL_ARCHES), programs, st.one_of(st.none(), st.integers(0, M64)))
def test_random_disassembly_never_raises(arch, expression, address):
    text = disassemble(expression, arch, address=address)
    assert isinstance(text, str)
    if "<bad: " in text:
        assert text.endswith(">") and text.count("<bad: ") == 1


def well_formed(arch):
    """A straight-line expression of known ops with well-formed operands (no branches)."""
    def op(opcode):
        kinds = SPEC[opcode][1]
        return st.tuples(*[operand(kind) for kind in kinds]).map(
            lambda parts: bytes([opcode]) + b"".join(parts))

    def operand(kind):
        order = "<" if arch.byteorder == "little" else ">"
        fixed = {"u8": "B", "s8": "b", "u16": "H", "s16": "h", "u32": "I", "s32": "i",
                 "u64": "Q", "s64": "q", "addr": "I" if arch.address_size == 4 else "Q"}
        if kind in fixed:
            return st.binary(min_size=struct.calcsize(fixed[kind]), max_size=struct.calcsize(fixed[kind]))
        if kind == "uleb":
            return st.integers(0, 1 << 70).map(uleb)
        if kind == "sleb":
            return st.integers(-(1 << 70), 1 << 70).map(sleb)
        return st.sampled_from([b"\x03" + struct.pack(order + "I", 5), b"\x09" + sleb(-3)])

    straight = sorted(set(SPEC) - {SKIP, BRA})
    return st.lists(st.sampled_from(straight).flatmap(op), max_size=20)


@given(st.sampled_from(ALL_ARCHES).flatmap(lambda a: st.tuples(st.just(a), well_formed(a))))
def test_well_formed_expressions_disassemble_completely(arch_ops):
    arch, ops = arch_ops
    text = disassemble(b"".join(ops), arch)
    assert "<bad" not in text
    assert (len(text.split("; ")) == len(ops)) if ops else (text == "")


# ===========================================================================
# Oracle: llvm-dwarfdump-16 renders the CFI expressions of a real object

LLVM_OP = re.compile(r"^(DW_OP_\w+)(?:\s+(.*))?$")
LAST_NUMBER = re.compile(r"([+-]?(?:0x[0-9a-fA-F]+|\d+))$")


def oracle_ops(line):
    """[(name, last number or None)] from llvm's `DW_OP_x a, DW_OP_y b` rendering."""
    body = line.split(":", 1)[1].strip()
    if not body.startswith("DW_OP_"):             # DW_CFA_expression: REG DW_OP_...
        body = body.split(" ", 1)[1]
    out = []
    for part in body.split(", "):
        match = LLVM_OP.match(part.strip())
        assert match, line
        out.append(normalise(match.group(1), match.group(2)))
    return out


def our_ops(text):
    out = []
    for part in text.split("; "):
        name, _, rest = part.partition(" ")
        out.append(normalise(name, re.sub(r"\([^)]*\)", "", rest).strip()))
    return out


def normalise(name, rest):
    # register-only operands are named differently by the two tools: skip them
    if not rest or re.fullmatch(r"DW_OP_(reg\d+|regx)", name):
        return (name, None)
    match = LAST_NUMBER.search(rest.strip())
    return (name, int(match.group(1), 0) if match else rest)


def random_expression(rng, arch):
    """A random well-formed expression of ops llvm-dwarfdump knows (all but GNU_encoded_addr)."""
    order = "<" if arch.byteorder == "little" else ">"
    out = b""
    for _ in range(rng.randint(1, 8)):
        opcode = rng.choice(sorted(set(SPEC) - {GNU_ENCODED_ADDR}))
        out += bytes([opcode])
        for kind in SPEC[opcode][1]:
            if kind == "uleb":
                out += uleb(rng.choice([0, 1, 127, 128, 300, rng.randrange(1 << 64)]))
            elif kind == "sleb":
                out += sleb(rng.choice([0, -1, 63, 64, -65, rng.randrange(-(1 << 63), 1 << 63)]))
            else:
                size = arch.address_size if kind == "addr" else int(kind[1:]) // 8
                out += bytes(rng.randrange(256) for _ in range(size))
    return out


def every_op_expressions(arch):
    out = []
    for opcode in sorted(set(SPEC) - {GNU_ENCODED_ADDR}):
        out.append(code(opcode, sample_operands(SPEC[opcode][1], arch)))
    out.append(code(CONSTU, uleb(M64), CONSTS, sleb(-(1 << 63)), CONST8S, le("q", -2)))
    return out


def build_object(tmp_path, arch, rules, flag):
    """An object whose one FDE carries the given (cfa_opcode, expression) rules."""
    lines = ["\t.text", "\t.globl f", "f:", "\t.cfi_startproc"]
    for cfa_op, expr in rules:
        if cfa_op == 0x0F:                          # DW_CFA_def_cfa_expression: len, expr
            raw = bytes([cfa_op]) + uleb(len(expr)) + expr
        else:                                       # DW_CFA_(val_)expression: reg, len, expr
            raw = bytes([cfa_op]) + uleb(3) + uleb(len(expr)) + expr
        lines.append("\t.cfi_escape " + ", ".join("0x%02x" % b for b in raw))
    lines += ["\tret", "\t.cfi_endproc", ""]
    source = tmp_path / ("cfi_%s.s" % arch.name)
    source.write_text("\n".join(lines))
    obj = tmp_path / ("cfi_%s.o" % arch.name)
    result = run_tool([need_tool("gcc"), flag, "-c", str(source), "-o", str(obj)])
    assert result.returncode == 0, result.stderr
    return obj


def dumped_expressions(obj):
    result = run_tool([need_tool("llvm-dwarfdump-16"), "--eh-frame", str(obj)])
    assert result.returncode == 0, result.stderr
    return [line.strip() for line in result.stdout.splitlines()
            if re.match(r"\s*DW_CFA_(def_cfa_expression|expression|val_expression):", line)]


@pytest.mark.parametrize("arch, flag", [(X86, "-m64"), (I386, "-m32")], ids=["x86_64", "i386"])
def test_disassembly_matches_llvm_dwarfdump(tmp_path, arch, flag):
    rng = random.Random(20240611 + arch.address_size)
    rules = []
    if arch is X86:
        rules += [(0x0F, PLT_LD), (0x10, PLT_REFERENCE), (0x16, PLT_LD)]
    rules += [(0x16, e) for e in every_op_expressions(arch)]
    rules += [(rng.choice([0x10, 0x16]), random_expression(rng, arch)) for _ in range(300)]
    obj = build_object(tmp_path, arch, rules, flag)
    lines = dumped_expressions(obj)
    assert len(lines) == len(rules)
    for (_, expr), line in zip(rules, lines):
        ours = disassemble(expr, arch)
        assert "<bad" not in ours
        assert our_ops(ours) == oracle_ops(line), (expr.hex(), ours, line)


def test_oracle_sees_the_plt_expression_as_we_do(tmp_path):
    obj = build_object(tmp_path, X86, [(0x0F, PLT_LD)], "-m64")
    (line,) = dumped_expressions(obj)
    names = re.findall(r"DW_OP_\w+", line)
    assert names == re.findall(r"DW_OP_\w+", PLT_TEXT)
    assert line == ("DW_CFA_def_cfa_expression: DW_OP_breg7 RSP+8, DW_OP_breg16 RIP+0, DW_OP_lit15, "
                    "DW_OP_and, DW_OP_lit11, DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus")
