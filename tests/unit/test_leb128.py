"""plugin/leb128.py: the one LEB128 reader, as the CFI instructions, the EHABI opcodes and
memory.Cursor use it (values against DWARF 5's own examples, table 7.8 and 7.9; the end and
length bounds each reader keeps)."""

import pytest
from hypothesis import given, strategies as st

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.formats import exidx_ops
from plugin.leb128 import LebError, LebProblem, encode_sleb, encode_uleb, read_sleb, read_uleb
from plugin.memory import Cursor, Region

# DWARF 5, tables 7.8 and 7.9: (value, encoded bytes).
UNSIGNED = [(2, b"\x02"), (127, b"\x7f"), (128, b"\x80\x01"), (129, b"\x81\x01"), (130, b"\x82\x01"),
            (12857, b"\xb9\x64")]
SIGNED = [(2, b"\x02"), (-2, b"\x7e"), (127, b"\xff\x00"), (-127, b"\x81\x7f"), (128, b"\x80\x01"),
          (-128, b"\x80\x7f"), (129, b"\x81\x01"), (-129, b"\xff\x7e")]


def _lazy(data):
    """A Region read by pages through a fetch function (not whole), as a live target's is."""
    return Region("lazy", 0x1000, len(data), lambda address, size: data[address - 0x1000:address - 0x1000 + size])


def test_the_specifications_examples():
    for value, data in UNSIGNED:
        assert read_uleb(b"\x00" + data + b"\x00", 1) == (value, 1 + len(data)) and encode_uleb(value) == data
        assert Cursor(_lazy(data)).uleb() == value == Cursor(Region.from_bytes("b", 0, data)).uleb()
    for value, data in SIGNED:
        assert read_sleb(data, 0) == (value, len(data)) and encode_sleb(value) == data
        assert Cursor(_lazy(data)).sleb() == value == Cursor(Region.from_bytes("b", 0, data)).sleb()


@given(st.integers(min_value=-(1 << 200), max_value=1 << 200))
def test_what_is_written_is_read_back(value):
    assert read_sleb(encode_sleb(value), 0) == (value, len(encode_sleb(value)))
    if value >= 0:
        assert read_uleb(encode_uleb(value), 0) == (value, len(encode_uleb(value)))


def test_a_number_cut_short_or_too_long_says_which():
    with pytest.raises(LebError) as cut:
        read_uleb(b"\x80\x80\x01", 0, end=2)       # the end bound, not the data's length
    assert cut.value.kind == LebProblem.TRUNCATED and str(cut.value) == "LEB128 number runs past the end"
    ten = b"\xff" * 9 + b"\x01"
    assert read_uleb(ten, 0, max_bits=63) == ((1 << 64) - 1, 10)
    with pytest.raises(LebError) as long:
        read_uleb(b"\xff" * 10 + b"\x01", 0, max_bits=63)
    assert long.value.kind == LebProblem.TOO_LONG
    with pytest.raises(DecodeError, match="LEB128 number runs past the end"):
        Cursor(_lazy(b"\x80\x80")).uleb()
    with pytest.raises(DecodeError, match="LEB128 number is too long"):
        Cursor(Region.from_bytes("b", 0, b"\x80" * 100 + b"\x01")).uleb()


def test_the_ehabi_vsp_operand_keeps_its_own_bounds_and_sentences():
    """0xB2 uleb128: vsp += 0x204 + (uleb128 << 2) (EHABI 10.3), at most 64 bits."""
    ops = exidx_ops.decode_opcodes(b"\xb2\x81\x01", ".ARM.extab", 0)
    assert ops[0].kind == exidx_ops.OpKind.VSP_ADD and ops[0].amount == 0x204 + (129 << 2)
    with pytest.raises(DecodeError, match="ULEB128 operand is cut short by the end of the opcodes"):
        exidx_ops.decode_opcodes(b"\xb2\x81", ".ARM.extab", 0)
    with pytest.raises(DecodeError, match="ULEB128 operand is too long"):
        exidx_ops.decode_opcodes(b"\xb2" + b"\xff" * 10 + b"\x01", ".ARM.extab", 0)


def test_decode_errors_say_their_kind():
    """A DecodeError carries a DecodeKind (plugin/errors.py), set where the problem is known."""
    region = Region.from_bytes("b", 0, b"\x01\x02")
    with pytest.raises(DecodeError) as past:
        region.read(1, 4)
    assert past.value.kind == DecodeKind.TRUNCATED
    with pytest.raises(DecodeError) as unreadable:
        Region("gone", 0x1000, 16, lambda address, size: (_ for _ in ()).throw(MemoryReadError(address, size))).read(0, 4)
    assert unreadable.value.kind == DecodeKind.UNREADABLE
    kinds = {}
    for name, data in (("cut", b"\x80\x80"), ("long", b"\x80" * 100 + b"\x01")):
        with pytest.raises(DecodeError) as bad:
            Cursor(Region.from_bytes("b", 0, data)).sleb()
        kinds[name] = bad.value.kind
    assert kinds == {"cut": DecodeKind.TRUNCATED, "long": DecodeKind.LIMIT}
    for data, kind in ((b"\xb2\x81", DecodeKind.TRUNCATED), (b"\xb2" + b"\xff" * 10 + b"\x01", DecodeKind.LIMIT),
                       (b"\xb1", DecodeKind.TRUNCATED), (b"\xb1\x00", DecodeKind.MALFORMED)):
        with pytest.raises(DecodeError) as bad:
            exidx_ops.decode_opcodes(data, ".ARM.extab", 0)
        assert bad.value.kind == kind, data
