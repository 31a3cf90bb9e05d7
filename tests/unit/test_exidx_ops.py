"""Every ARM EHABI unwind instruction (ARM IHI 0038 section 10.3), one case each, plus bad input."""

import pytest
from hypothesis import given, settings, strategies as st

from plugin.errors import DecodeError
from plugin.formats.exidx_ops import OpKind, decode_opcodes

# (bytes, kind, amount, registers, register) of the single instruction the bytes hold.
CASES = [
    ("00", OpKind.VSP_ADD, 4, (), None),
    ("3f", OpKind.VSP_ADD, 256, (), None),
    ("40", OpKind.VSP_SUB, 4, (), None),
    ("7f", OpKind.VSP_SUB, 256, (), None),
    ("8000", OpKind.REFUSE, 0, (), None),
    ("8001", OpKind.POP, 4, (4,), None),
    ("8400", OpKind.POP, 4, (14,), None),
    ("8800", OpKind.POP, 4, (15,), None),
    ("8fff", OpKind.POP, 48, tuple(range(4, 16)), None),
    ("840b", OpKind.POP, 16, (4, 5, 7, 14), None),
    ("90", OpKind.VSP_FROM_REGISTER, 0, (), 0),
    ("97", OpKind.VSP_FROM_REGISTER, 0, (), 7),
    ("9b", OpKind.VSP_FROM_REGISTER, 0, (), 11),
    ("9e", OpKind.VSP_FROM_REGISTER, 0, (), 14),
    ("a0", OpKind.POP, 4, (4,), None),
    ("a7", OpKind.POP, 32, tuple(range(4, 12)), None),
    ("a8", OpKind.POP, 8, (4, 14), None),
    ("af", OpKind.POP, 36, tuple(range(4, 12)) + (14,), None),
    ("b0", OpKind.FINISH, 0, (), None),
    ("b101", OpKind.POP, 4, (0,), None),
    ("b10f", OpKind.POP, 16, (0, 1, 2, 3), None),
    ("b108", OpKind.POP, 4, (3,), None),
    ("b200", OpKind.VSP_ADD, 0x204, (), None),
    ("b2ee04", OpKind.VSP_ADD, 3004, (), None),
    ("b28101", OpKind.VSP_ADD, 0x204 + (129 << 2), (), None),
    ("b312", OpKind.POP_VFP, 3 * 8 + 4, (1, 2, 3), None),
    ("b3ff", OpKind.POP_VFP, 16 * 8 + 4, tuple(range(15, 31)), None),
    ("b8", OpKind.POP_VFP, 12, (8,), None),
    ("bf", OpKind.POP_VFP, 68, tuple(range(8, 16)), None),
    ("c0", OpKind.POP_WMMX, 8, (10,), None),
    ("c5", OpKind.POP_WMMX, 48, tuple(range(10, 16)), None),
    ("c623", OpKind.POP_WMMX, 32, (2, 3, 4, 5), None),
    ("c6f0", OpKind.POP_WMMX, 8, (15,), None),
    ("c701", OpKind.POP_WMMX_CONTROL, 4, (0,), None),
    ("c70f", OpKind.POP_WMMX_CONTROL, 16, (0, 1, 2, 3), None),
    ("c800", OpKind.POP_VFP, 8, (16,), None),
    ("c8f0", OpKind.POP_VFP, 8, (31,), None),
    ("c80f", OpKind.POP_VFP, 128, tuple(range(16, 32)), None),
    ("c980", OpKind.POP_VFP, 8, (8,), None),
    ("c981", OpKind.POP_VFP, 16, (8, 9), None),
    ("c98f", OpKind.POP_VFP, 128, tuple(range(8, 24)), None),
    ("d0", OpKind.POP_VFP, 8, (8,), None),
    ("d7", OpKind.POP_VFP, 64, tuple(range(8, 16)), None),
]


@pytest.mark.parametrize("hexbytes,kind,amount,registers,register", CASES, ids=[c[0] for c in CASES])
def test_each_instruction(hexbytes, kind, amount, registers, register):
    data = bytes.fromhex(hexbytes)
    (ins,) = decode_opcodes(data, ".ARM.extab", 0x10)
    assert ins.kind == kind
    assert ins.amount == amount
    assert ins.registers == registers
    assert ins.register == register
    assert ins.raw == data
    assert ins.fstmx == (data[0] == 0xB3 or 0xB8 <= data[0] <= 0xBF)


SPARE = (["9d", "9f", "b100", "b110", "b1f1", "b4", "b5", "b6", "b7", "c700", "c710", "c7ff",
          "ca", "cb", "cc", "cd", "ce", "cf"] + ["%02x" % b for b in range(0xD8, 0x100)])


@pytest.mark.parametrize("hexbytes", SPARE)
def test_spare_and_reserved_encodings_are_errors(hexbytes):
    with pytest.raises(DecodeError) as info:
        decode_opcodes(bytes.fromhex("b0" + hexbytes), ".ARM.extab", 0x24)
    err = info.value
    assert err.section == ".ARM.extab" and err.offset == 0x24
    assert "opcode byte 1" in err.cause and ("spare" in err.cause or "reserved" in err.cause)


@pytest.mark.parametrize("hexbytes", ["80", "8f", "b1", "b2", "b280", "b3", "c6", "c7", "c8", "c9"])
def test_instruction_cut_short_is_an_error(hexbytes):
    with pytest.raises(DecodeError, match="cut short"):
        decode_opcodes(bytes.fromhex(hexbytes), ".ARM.exidx", 8)


@pytest.mark.parametrize("hexbytes", ["c6f1", "c8f1", "c8ff"])
def test_register_ranges_past_the_last_register_are_errors(hexbytes):
    with pytest.raises(DecodeError, match="runs past"):
        decode_opcodes(bytes.fromhex(hexbytes), ".ARM.extab", 0)


def test_sequence_keeps_positions_and_instructions_after_finish():
    ops = decode_opcodes(bytes.fromhex("9741840bb0b0"), ".ARM.extab", 0)
    assert [o.kind for o in ops] == [OpKind.VSP_FROM_REGISTER, OpKind.VSP_SUB, OpKind.POP,
                                     OpKind.FINISH, OpKind.FINISH]
    assert [o.position for o in ops] == [0, 1, 2, 4, 5]
    assert [o.text() for o in ops][:3] == ["vsp = r7", "vsp = vsp - 8", "pop {r4, r5, r7, r14}"]


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_decode_or_raise_decode_error(data):
    try:
        ops = decode_opcodes(data, ".ARM.extab", 0)
    except DecodeError as exc:
        assert exc.section == ".ARM.extab"
        return
    assert b"".join(o.raw for o in ops) == data
    assert all(o.amount >= 0 for o in ops)
