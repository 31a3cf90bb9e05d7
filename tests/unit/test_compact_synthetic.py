"""Synthetic __unwind_info sections and encodings, built from the documented layout.

* i386: ld64.lld cannot link i386, so the sections are laid out here and the
  expected rules are worked out by hand from the format description
  (libunwind's CompactUnwinder_x86 arithmetic, written as CFA offsets);
* the permutation decoder is checked against LLVM's encoder for every
  ordered choice of 1..6 registers;
* each corner case of the write-up's section 5;
* hypothesis: random and mutated bytes never make the decoders raise
  anything but DecodeError, and they terminate.
"""

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compact_support import build_unwind_info, encode_permutation

from plugin import arch as arches
from plugin.errors import DecodeError
from plugin.formats import compact_unwind as cu
from plugin.memory import Region
from plugin.model.rules import RuleKind

I386 = arches.BY_NAME["i386"]
X86_64 = arches.BY_NAME["x86_64"]
ARM64 = arches.BY_NAME["aarch64"]
ALL_ARCHES = (I386, X86_64, ARM64, arches.BY_NAME["s390x"], None)

# i386 DWARF numbers: eax 0, ecx 1, edx 2, ebx 3, esp 4, ebp 5, esi 6, edi 7, eip 8
EBX, ECX, EDX, ESP, EBP, ESI, EDI, EIP = 3, 1, 2, 4, 5, 6, 7, 8
# compact numbers (i386): 1 ebx, 2 ecx, 3 edx, 4 edi, 5 esi, 6 ebp
C_EBX, C_ECX, C_EDX, C_EDI, C_ESI, C_EBP = 1, 2, 3, 4, 5, 6


def unwind_info(data, arch=X86_64, base=0x1000):
    return cu.UnwindInfo(Region.from_bytes("__unwind_info", 0, data), arch, base)


def rules_of(row):
    return {n: (r.kind, r.offset) for n, r in row.registers.items()}


# ---------------------------------------------------------------------------
# i386
# ---------------------------------------------------------------------------

I386_BASE = 0x1000
# A function whose prologue is: push %ebp; push %ebx; sub $0x1000, %esp
I386_IND_CODE = bytes([0x55, 0x53, 0x81, 0xEC]) + struct.pack("<I", 0x1000) + b"\x90" * 8

EBP_ONE = 0x01010005                                  # ebp frame, offset 1, slot 0 = esi
EBP_THREE = 0x01030000 | C_EBX | C_EDI << 3 | C_ESI << 6   # offset 3: ebx, edi, esi
IMMD = 0x02080000 | 3 << 10 | 14                      # 32 bytes, [ebx, esi, edi]
IND = 0x03040000 | 3 << 13 | 2 << 10 | 4              # imm at +4, adjust 3 words, [ebx, ebp]
DWARF = 0x04000123


def i386_section():
    common = [EBP_ONE, IMMD]
    pages = [
        # compressed page from 0x100: common[0], local[0] (=index 2), common[1]
        (3, 0x100, [(0x0, 0), (0x40, 2), (0x80, 1)], [EBP_THREE]),
        # regular page from 0x200
        (2, 0x200, [(0x200, IND), (0x280, DWARF), (0x2A0, 0)], []),
    ]
    return build_unwind_info(pages, 0x300, common=common)


def i386_code(address, size):
    offset = address - (I386_BASE + 0x200)
    if not 0 <= offset <= len(I386_IND_CODE) - size:
        raise DecodeError("code", offset, "outside the test function")
    return I386_IND_CODE[offset:offset + size]


def test_i386_section_layout_and_lookup():
    ui = unwind_info(i386_section(), I386, I386_BASE)
    pages = ui.pages()
    assert [p.kind for p in pages] == ["compressed", "regular"]
    assert [(e.function_offset, e.encoding, e.encoding_index) for e in pages[0].entries] == [
        (0x100, EBP_ONE, 0), (0x140, EBP_THREE, 2), (0x180, IMMD, 1)]
    assert pages[0].encodings == (EBP_THREE,)
    assert [(s - I386_BASE, e - I386_BASE, enc) for s, e, enc in ui.entries()] == [
        (0x100, 0x140, EBP_ONE), (0x140, 0x180, EBP_THREE), (0x180, 0x200, IMMD),
        (0x200, 0x280, IND), (0x280, 0x2A0, DWARF), (0x2A0, 0x300, 0)]
    entry = ui.lookup(I386_BASE + 0x1FF)
    assert (entry.function_start, entry.function_end, entry.encoding) == \
        (I386_BASE + 0x180, I386_BASE + 0x200, IMMD)
    assert ui.lookup(I386_BASE + 0xFF) is None and ui.lookup(I386_BASE + 0x300) is None


def test_i386_ebp_frame_one_register():
    d = cu.decode_encoding(EBP_ONE, I386)
    assert (d.mode, d.registers, d.frame_offset) == ("RBP_FRAME", (ESI,), 4)
    row = cu.to_row(d, 0x1100, I386)
    # CFA = ebp+8; esi at ebp-4 = CFA-12 (libunwind: EBP - 4*offset)
    assert (row.cfa.register, row.cfa.offset) == (EBP, 8)
    assert rules_of(row) == {EBP: (RuleKind.OFFSET, -8), EIP: (RuleKind.OFFSET, -4), ESI: (RuleKind.OFFSET, -12)}


def test_i386_ebp_frame_three_registers():
    d = cu.decode_encoding(EBP_THREE, I386)
    assert d.registers == (EBX, EDI, ESI)
    row = cu.to_row(d, 0x1140, I386)
    # slots start at ebp-12 and go up: ebx ebp-12, edi ebp-8, esi ebp-4
    assert rules_of(row) == {EBP: (RuleKind.OFFSET, -8), EIP: (RuleKind.OFFSET, -4), EBX: (RuleKind.OFFSET, -20),
                             EDI: (RuleKind.OFFSET, -16), ESI: (RuleKind.OFFSET, -12)}


def test_i386_stack_immediate():
    d = cu.decode_encoding(IMMD, I386)
    assert (d.mode, d.stack_size, d.registers) == ("STACK_IMMD", 32, (EBX, ESI, EDI))
    row = cu.to_row(d, 0x1180, I386)
    # registers start at esp + 32 - 4 - 4*3 = CFA-16, the return address at CFA-4
    assert (row.cfa.register, row.cfa.offset) == (ESP, 32)
    assert rules_of(row) == {EIP: (RuleKind.OFFSET, -4), EBX: (RuleKind.OFFSET, -16), ESI: (RuleKind.OFFSET, -12),
                             EDI: (RuleKind.OFFSET, -8)}


def test_i386_stack_indirect_reads_the_sub_immediate():
    ui = unwind_info(i386_section(), I386, I386_BASE)
    entry = ui.lookup(I386_BASE + 0x210)
    d = ui.decode(entry)
    assert (d.mode, d.sub_offset, d.stack_adjust, d.registers) == ("STACK_IND", 4, 12, (EBX, EBP))
    row = ui.row(entry, read_code=i386_code)
    # entry esp = CFA-4; two pushes and the sub: CFA = esp + 0x1000 + 12
    assert (row.cfa.register, row.cfa.offset) == (ESP, 0x1000 + 12)
    assert rules_of(row) == {EIP: (RuleKind.OFFSET, -4), EBP: (RuleKind.OFFSET, -8), EBX: (RuleKind.OFFSET, -12)}
    assert row.address == I386_BASE + 0x200 and row.end == I386_BASE + 0x280


def test_stack_indirect_checks_the_sub_opcode():
    d = cu.decode_encoding(IND & ~0x00FF0000 | 2 << 16, I386)     # offset 2: not an immediate
    with pytest.raises(DecodeError, match="no `sub"):
        cu.to_row(d, I386_BASE + 0x200, I386, read_code=i386_code)


def test_i386_dwarf_and_none():
    d = cu.decode_encoding(DWARF, I386)
    assert (d.mode, d.dwarf_offset) == ("DWARF", 0x123)
    assert cu.to_row(d, 0, I386) is None
    assert cu.decode_encoding(0, I386).mode == "NONE"
    assert cu.to_row(cu.decode_encoding(0, I386), 0, I386) is None


# ---------------------------------------------------------------------------
# Opcode details
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("count", range(1, 7))
def test_permutation_decoder_inverts_llvm_encoder(count):
    x86_64_names = ["rbx", "r12", "r13", "r14", "r15", "rbp"]
    checked = 0
    for order in itertools.permutations(range(1, 7), count):
        permutation = encode_permutation(list(order))
        encoding = 0x02000000 | 4 << 16 | count << 10 | permutation
        d = cu.decode_encoding(encoding, X86_64)
        assert d.registers == tuple(X86_64.number_of(x86_64_names[r - 1]) for r in order)
        checked += 1
    assert checked == {1: 6, 2: 30, 3: 120, 4: 360, 5: 720, 6: 720}[count]


def test_x86_64_frameless_slots():
    # rbp pushed first (CFA-16), then r15, r14, rbx: registers[0] is rbx, lowest
    order = [1, 4, 5, 6]
    encoding = 0x02000000 | 6 << 16 | 4 << 10 | encode_permutation(order)
    d = cu.decode_encoding(encoding, X86_64)
    assert d.saved == ((3, -40), (14, -32), (15, -24), (6, -16))
    row = cu.to_row(d, 0, X86_64)
    assert (row.cfa.register, row.cfa.offset) == (7, 48)
    assert row.registers[16] .offset == -8


def test_arm64_frame_and_frameless_pairs():
    d = cu.decode_encoding(0x04000000 | 0x001 | 0x004 | 0x100, ARM64)
    assert d.registers == (19, 20, 23, 24, 72, 73)
    assert d.saved == ((19, -24), (20, -32), (23, -40), (24, -48), (72, -56), (73, -64))
    row = cu.to_row(d, 0, ARM64)
    assert (row.cfa.register, row.cfa.offset) == (29, 16)
    assert rules_of(row)[29] == (RuleKind.OFFSET, -16) and rules_of(row)[30] == (RuleKind.OFFSET, -8)
    d = cu.decode_encoding(0x02003001, ARM64)
    assert (d.mode, d.stack_size, d.saved) == ("FRAMELESS", 48, ((19, -8), (20, -16)))
    row = cu.to_row(d, 0, ARM64)
    assert (row.cfa.register, row.cfa.offset) == (31, 48)
    assert row.registers[30].kind == RuleKind.SAME


def test_flags_and_text():
    d = cu.decode_encoding(0xD1020021, X86_64)
    assert d.has_lsda and d.personality_index == 1 and not d.function_start
    assert d.text.startswith("rbp frame: CFA=rbp+16, saved rbx=[CFA-32] r14=[CFA-24]")
    assert d.text.endswith("LSDA, personality 1, not a function start")
    assert "d8=[CFA-24]" in cu.decode_encoding(0x04000100, ARM64).text
    assert cu.decode_encoding(0x0F000000, X86_64).mode == "UNKNOWN"
    assert cu.decode_encoding(0x01000000, ARM64).mode == "UNKNOWN"
    assert cu.decode_encoding(0x01000000, arches.BY_NAME["s390x"]).mode == "UNKNOWN"


# ---------------------------------------------------------------------------
# Section 5 corner cases
# ---------------------------------------------------------------------------

def test_zero_length_entries_are_dropped():
    data = build_unwind_info([(2, 0x100, [(0x100, 0x01000000), (0x120, 0), (0x120, 0x04000680),
                                           (0x180, 0x02010000)], [])], 0x200)
    ui = unwind_info(data)
    assert len(ui.pages()[0].entries) == 4              # stored as they are
    assert [(s - 0x1000, e - 0x1000, enc) for s, e, enc in ui.entries()] == [
        (0x100, 0x120, 0x01000000), (0x120, 0x180, 0x04000680), (0x180, 0x200, 0x02010000)]
    entry = ui.lookup(0x1120)
    assert entry.encoding == 0x04000680 and entry.entry_index == 2
    assert ui.lookup(0x111F).function_end == 0x1120


def test_register_field_7_means_no_register():
    # slots: 7, rbx, 7, r12, 0
    d = cu.decode_encoding(0x01050000 | 7 | 1 << 3 | 7 << 6 | 2 << 9, X86_64)
    assert d.registers == (3, 12)
    assert d.saved == ((3, -48), (12, -32))


def test_register_count_7_is_clamped_to_6():
    d = cu.decode_encoding(0x02100000 | 7 << 10, X86_64)
    assert len(d.registers) == 6
    assert d.registers == (3, 12, 13, 14, 15, 6)


def test_permutation_naming_no_register_is_a_decode_error():
    with pytest.raises(DecodeError, match="permutation"):
        cu.decode_encoding(0x02010000 | 1 << 10 | 6, X86_64)    # one register, digit 6


def test_unknown_version():
    data = build_unwind_info([(2, 0x100, [(0x100, 0x01000000)], [])], 0x200, version=2)
    with pytest.raises(DecodeError, match="version 2"):
        unwind_info(data)


def test_unknown_page_kind_is_skipped_by_pages_and_fails_lookup():
    data = build_unwind_info([(2, 0x100, [(0x100, 0x01000000)], []), (4, 0x200, [], []),
                              (3, 0x300, [(0, 0)], [0x02010000])], 0x400)
    ui = unwind_info(data)
    assert [p.index for p in ui.pages()] == [0, 2]
    assert len(ui.warnings) == 1 and "unknown kind 4" in ui.warnings[0]
    assert [s - 0x1000 for s, _, _ in ui.entries()] == [0x100, 0x300]
    assert ui.lookup(0x1150).encoding == 0x01000000
    assert ui.lookup(0x1350).encoding == 0x02010000
    with pytest.raises(DecodeError, match="unknown kind 4"):
        ui.lookup(0x1250)
    with pytest.raises(DecodeError, match="unknown kind 4"):
        ui.page(1)


def _good():
    return bytearray(build_unwind_info(
        [(3, 0x100, [(0, 0), (0x40, 1)], [0x02020000]), (2, 0x200, [(0x200, 0x01000000)], [])],
        0x300, common=[0x01000000], personalities=[0x2000], lsdas=[(0x140, 0x5000)]))


@pytest.mark.parametrize("field,value,message", [
    (4, 0x10000, "common encodings"),          # common encodings offset past the end
    (8, 0x10000, "common encodings"),          # common encodings count
    (12, 0x10000, "personalities"),
    (20, 0x10000, "first-level index"),
    (24, 0x10000, "first-level index"),
])
def test_out_of_bounds_header_offsets(field, value, message):
    data = _good()
    struct.pack_into("<I", data, field, value)
    with pytest.raises(DecodeError, match=message):
        unwind_info(bytes(data))


def _index_at(data):
    return struct.unpack_from("<I", data, 20)[0]


def test_out_of_bounds_page_offset():
    data = _good()
    struct.pack_into("<I", data, _index_at(data) + 4, len(data) + 100)
    ui = unwind_info(bytes(data))
    with pytest.raises(DecodeError):
        ui.pages()
    with pytest.raises(DecodeError):
        ui.lookup(0x1100)


def test_out_of_bounds_lsda_array():
    data = _good()
    struct.pack_into("<I", data, _index_at(data) + 2 * 12 + 8, len(data) + 8)
    with pytest.raises(DecodeError, match="LSDA"):
        unwind_info(bytes(data))


def test_lsda_and_personality_resolution():
    ui = unwind_info(bytes(_good()))
    entry = ui.lookup(0x1140)
    assert entry.lsda is None               # encoding has no LSDA bit
    data = build_unwind_info([(2, 0x100, [(0x100, 0x51000000), (0x180, 0x61000000)], [])], 0x200,
                             personalities=[0x2000], lsdas=[(0x100, 0x5000)])
    ui = unwind_info(data)
    first, second = ui.lookup(0x1100), ui.lookup(0x1180)
    assert (first.lsda, first.personality) == (0x6000, 0x3000)
    # LSDA bit without a descriptor, personality 2 of 1: both unresolvable
    assert (second.lsda, second.personality) == (None, None)


def test_encoding_index_out_of_bounds():
    data = build_unwind_info([(3, 0x100, [(0, 0), (0x10, 2)], [0x02010000])], 0x200,
                             common=[0x01000000])
    ui = unwind_info(data)
    with pytest.raises(DecodeError, match="encoding index 2"):
        ui.pages()


def test_page_entries_out_of_order():
    data = build_unwind_info([(2, 0x100, [(0x180, 0x01000000), (0x140, 0x01000000)], [])], 0x200)
    with pytest.raises(DecodeError, match="out of order"):
        unwind_info(data).lookup(0x1150)
    data = build_unwind_info([(3, 0x100, [(0x80, 0), (0x40, 0)], [0x01000000])], 0x200)
    with pytest.raises(DecodeError, match="out of order"):
        unwind_info(data).pages()


def test_page_entry_before_or_past_its_page():
    data = build_unwind_info([(2, 0x100, [(0x80, 0x01000000)], [])], 0x200)
    with pytest.raises(DecodeError, match="out of order"):
        unwind_info(data).pages()
    data = build_unwind_info([(2, 0x100, [(0x100, 0x01000000), (0x200, 0)], [])], 0x200)
    with pytest.raises(DecodeError, match="past the page's end"):
        unwind_info(data).pages()


def test_first_level_index_out_of_order():
    data = build_unwind_info([(2, 0x300, [(0x300, 0x01000000)], []),
                              (2, 0x100, [(0x100, 0x01000000)], [])], 0x400)
    with pytest.raises(DecodeError, match="out of order"):
        unwind_info(data)


def test_index_entry_without_page_is_empty():
    data = bytearray(build_unwind_info([(2, 0x100, [(0x100, 0x01000000)], []),
                                        (2, 0x200, [(0x200, 0x01000000)], [])], 0x300))
    struct.pack_into("<I", data, _index_at(data) + 12 + 4, 0)
    ui = unwind_info(bytes(data))
    assert [p.kind for p in ui.pages()] == ["regular", "none"]
    assert ui.lookup(0x1250) is None
    assert ui.lookup(0x11FF).function_end == 0x1200


def test_empty_and_truncated_sections():
    assert unwind_info(build_unwind_info([], 0)).lookup(0x1000) is None
    with pytest.raises(DecodeError):
        unwind_info(b"\x01\x00\x00\x00")


# ---------------------------------------------------------------------------
# Hypothesis: only DecodeError, always terminates
# ---------------------------------------------------------------------------

FUZZ = settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _exercise(data, arch, pcs):
    try:
        ui = unwind_info(data, arch, 0x1000)
    except DecodeError:
        return
    for call in (ui.pages, ui.entries):
        try:
            call()
        except DecodeError:
            pass
    for pc in pcs:
        try:
            entry = ui.lookup(pc)
            if entry is not None:
                ui.row(entry, read_code=lambda a, n: bytes(n))
        except DecodeError:
            pass


@FUZZ
@given(st.binary(max_size=512), st.sampled_from([I386, X86_64, ARM64]),
       st.lists(st.integers(0, 0x3000), max_size=8))
def test_random_bytes_only_raise_decode_error(data, arch, pcs):
    _exercise(data, arch, pcs)


SEED = bytes(build_unwind_info(
    [(3, 0x100, [(0, 0), (0x40, 1), (0x80, 2), (0x80, 3)], [0x02020000, 0x03032400]),
     (2, 0x200, [(0x200, 0x01000000), (0x220, 0x04000010), (0x240, 0x41000000)], [])],
    0x300, common=[0x01000000, 0x02040804], personalities=[0x2000], lsdas=[(0x240, 0x5000)]))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1,
                max_size=6),
       st.sampled_from([I386, X86_64, ARM64]),
       st.lists(st.integers(0x1000, 0x1400), max_size=8))
def test_mutated_sections_only_raise_decode_error(mutations, arch, pcs):
    data = bytearray(SEED)
    for position, value in mutations:
        data[position] = value
    _exercise(bytes(data), arch, pcs + [0x1100, 0x1150, 0x1210, 0x1250])


@FUZZ
@given(st.integers(0, 0xFFFFFFFF), st.sampled_from(ALL_ARCHES), st.binary(min_size=6, max_size=6))
def test_any_encoding_decodes_or_raises_decode_error(encoding, arch, code):
    try:
        d = cu.decode_encoding(encoding, arch)
    except DecodeError:
        return
    assert isinstance(d.text, str)
    if arch is None or arch.name == "s390x":
        return
    try:
        cu.to_row(d, 0x1000, arch, read_code=lambda a, n: code[:n])
    except DecodeError:
        pass
