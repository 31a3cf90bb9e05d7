"""The .ARM.exidx index and .ARM.extab entries, built byte by byte here."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from plugin.errors import DecodeError
from plugin.formats.exidx import EntryKind, ExidxTable, Model, prel31
from plugin.formats.exidx_ops import OpKind
from plugin.memory import Region

INDEX_AT = 0x20000
EXTAB_AT = 0x1F000


def rel(target, field):
    return (target - field) & 0x7FFFFFFF


def index(entries):
    """entries: [(function, word1 or ("table", address))] -> bytes at INDEX_AT."""
    out = b""
    for i, (function, second) in enumerate(entries):
        at = INDEX_AT + 8 * i
        if isinstance(second, tuple):
            second = rel(second[1], at + 4)
        out += struct.pack("<II", rel(function, at), second)
    return out


def table(entries, extab=b""):
    extab_region = Region.from_bytes(".ARM.extab", EXTAB_AT, extab)
    return ExidxTable(Region.from_bytes(".ARM.exidx", INDEX_AT, index(entries)),
                      lambda address: extab_region)


def test_prel31_sign_extends():
    assert prel31(0x7FFFFFFC, 0x1000) == 0xFFC
    assert prel31(0x10, 0x1000) == 0x1010
    assert prel31(0x40000000, 0x40000000) == 0


def test_kinds_and_binary_search():
    t = table([(0x1000, 1), (0x1100, 0x80A8B0B0), (0x1200, ("table", EXTAB_AT))],
              struct.pack("<I", 0x8101A8B0) + struct.pack("<I", 0xB0B0B0B0))
    first, second, third = t.entries()
    assert (first.kind, second.kind, third.kind) == (EntryKind.CANTUNWIND, EntryKind.INLINE, EntryKind.TABLE)
    assert third.table == EXTAB_AT and third.end is None and first.end == 0x1100
    assert t.find(0xFFF) is None
    assert t.find(0x1000).index == 0 and t.find(0x10FF).index == 0
    assert t.find(0x1100).index == 1 and t.find(0x1234567).index == 2
    assert t.describe(first).model is None
    inline = t.describe(second)
    assert inline.model == Model.COMPACT and inline.personality_index == 0
    assert [i.kind for i in inline.instructions] == [OpKind.POP, OpKind.FINISH, OpKind.FINISH]
    assert inline.opcodes_at == INDEX_AT + 12 and inline.lsda is None
    pr1 = t.describe(third)
    assert pr1.personality_index == 1 and pr1.opcode_words == 2
    assert pr1.opcodes == bytes.fromhex("a8b0b0b0b0b0")
    assert pr1.lsda == EXTAB_AT + 8


def test_generic_model_needs_a_known_personality():
    personality = 0x5001
    extab = struct.pack("<II", rel(personality, EXTAB_AT), 0x01A8B0B0) + struct.pack("<I", 0x97B0B0B0)
    t = table([(0x1000, ("table", EXTAB_AT))], extab)
    entry = t.entries()[0]
    unknown = t.describe(entry, lambda a: "mystery")
    assert unknown.model == Model.GENERIC and unknown.personality == personality and not unknown.decoded
    known = t.describe(entry, {personality: "__gxx_personality_v0@plt"}.get)
    assert known.decoded and known.opcode_words == 2
    assert [i.text() for i in known.instructions][:3] == ["pop {r4, r14}", "finish", "finish"]
    assert known.lsda == EXTAB_AT + 12


@pytest.mark.parametrize("entries,extab,cause", [
    ([(0x2000, 1), (0x1000, 1)], b"", "not sorted"),
    ([(0x1000, 0x83B0B0B0)], b"", "reserved"),
    ([(0x1000, 0x81B0B0B0)], b"", "inline entry must use personality index 0"),
    ([(0x1000, 0x90B0B0B0)], b"", "bits 28-30"),
    ([(0x1000, ("table", EXTAB_AT + 0x100))], b"\0" * 8, "outside readable memory"),
    ([(0x1000, ("table", EXTAB_AT))], struct.pack("<I", 0x8105B0B0), "run past the end"),
    ([(0x1000, 0x80B5B0B0)], b"", "spare"),
])
def test_bad_tables_are_decode_errors(entries, extab, cause):
    with pytest.raises(DecodeError, match=cause) as info:
        t = table(entries, extab)
        for entry in t.entries():
            t.describe(entry, lambda a: "__gxx_personality_v0")
    assert info.value.section in (".ARM.exidx", ".ARM.extab")


def test_function_word_with_bit_31_and_odd_size_are_errors():
    bad = Region.from_bytes(".ARM.exidx", INDEX_AT, struct.pack("<II", 0x80000000, 1))
    with pytest.raises(DecodeError, match="bit 31") as info:
        ExidxTable(bad, lambda a: None)
    assert info.value.offset == 0
    with pytest.raises(DecodeError, match="multiple of 8"):
        ExidxTable(Region.from_bytes(".ARM.exidx", INDEX_AT, b"\0" * 12), lambda a: None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=96), st.binary(max_size=96), st.integers(0, 0xFFFFFFFF))
def test_any_bytes_give_entries_or_decode_error(index_bytes, extab_bytes, pc):
    extab_region = Region.from_bytes(".ARM.extab", INDEX_AT - len(extab_bytes), extab_bytes)
    try:
        t = ExidxTable(Region.from_bytes(".ARM.exidx", INDEX_AT, index_bytes), lambda a: extab_region)
        t.find(pc)
        for entry in t.entries():
            t.describe(entry, lambda a: "__gxx_personality_v0")
    except DecodeError as exc:
        assert exc.section in (".ARM.exidx", ".ARM.extab")
