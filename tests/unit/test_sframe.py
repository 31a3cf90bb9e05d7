"""SFrame decoder on sections written in the test, for what no tool here writes.

Layouts are built by test_sframe_dumps.build_sframe() (header, aux header,
FDEs, then FREs; v3 puts each FDE's 5-byte attribute before its FREs):
4-byte FRE starts and data words, MASK PC type, flex FDEs with padding
words, AArch64 key B and signed RAs, outermost frames, unsorted FDEs,
s390x rules, big-endian sections. Then bad input, and random input that
must give DecodeError and nothing else.
"""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugin import arch as arches
from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.formats.sframe import SFrameSection
from plugin.memory import Region
from plugin.model.rules import RuleKind
from sframe_dumps import build_sframe, fde, fre, region_of

AMD64, AARCH64_LE, AARCH64_BE, S390X = 3, 2, 1, 4
X86 = arches.BY_NAME["x86_64"]
A64 = arches.BY_NAME["aarch64"]
Z = arches.BY_NAME["s390x"]


def section_of(data, address=0, byteorder="little", arch=None):
    return SFrameSection(region_of(data, address, byteorder=byteorder), arch)


# -- header ---------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("order", ["little", "big"])
def test_header_fields_and_aux_header_are_read(version, order):
    data = build_sframe(version, AARCH64_BE if order == "big" else AMD64,
                        [fde(0x4000, 0x20, [fre(0, [8])])], flags=0x1 | (0x4 if version > 1 else 0),
                        fixed_ra=-8 if order == "little" else 0, fixed_fp=0,
                        aux=b"\xAA\xBB\xCC", byteorder=order, address=0x3000)
    # The Region's own byte order does not matter: the magic decides.
    section = section_of(data, 0x3000, byteorder="little")
    assert section.version == version and section.byteorder == order
    assert section.aux_header_len == 3 and section.header_size == 31
    assert section.sorted and section.pcrel == (version > 1)
    assert section.fixed_ra_offset == (-8 if order == "little" else 0)
    assert (section.num_fdes, section.num_fres) == (1, 1)
    assert section.abi_name == ("AARCH64_ENDIAN_BIG" if order == "big" else "AMD64_ENDIAN_LITTLE")
    assert section.arch.name == ("aarch64" if order == "big" else "x86_64")
    (only,) = section.fdes
    assert (only.start, only.size, only.end) == (0x4000, 0x20, 0x4020)
    assert section.fres(only)[0].cfa_offset == 8


@pytest.mark.parametrize("version", [2, 3])
def test_function_start_with_and_without_pcrel(version):
    fdes = [fde(0x1000, 0x10, [fre(0, [8])]), fde(0x1010, 0x10, [fre(0, [8])])]
    for flags in (0x0, 0x4):
        data = build_sframe(version, AMD64, fdes, flags=flags, fixed_ra=-8, address=0x7000)
        section = section_of(data, 0x7000)
        assert [f.start for f in section.fdes] == [0x1000, 0x1010]
        # What is stored differs: relative to the field, or to the section.
        fde_size = 16 if version == 3 else 20
        if flags:
            assert section.fdes[1].start_field == 0x1010 - (0x7000 + 28 + fde_size)
        else:
            assert section.fdes[1].start_field == 0x1010 - 0x7000


def test_v1_starts_are_section_relative_even_with_bit_2_set():
    # v1 has no PCREL flag; bit 2 means nothing there.
    data = build_sframe(1, AMD64, [fde(0x1000, 0x10, [fre(0, [8])])], flags=0x0,
                        fixed_ra=-8, address=0x7000)
    data = data[:3] + bytes([0x4]) + data[4:]
    section = section_of(data, 0x7000)
    assert not section.pcrel and section.fdes[0].start == 0x1000


def test_explicit_arch_wins_over_abi():
    data = build_sframe(2, AMD64, [fde(0, 4, [fre(0, [8])])], fixed_ra=-8)
    assert section_of(data, arch=X86).arch is X86


# -- FRE encodings ----------------------------------------------------------

@pytest.mark.parametrize("fre_size", [1, 2, 4])
@pytest.mark.parametrize("word_size", [1, 2, 4])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_fre_start_sizes_and_data_word_sizes(fre_size, word_size, version):
    limit = {1: 0xF0, 2: 0xFFF0, 4: 0x123456}[fre_size]
    cfa = {1: 120, 2: 30000, 4: 2_000_000}[word_size]
    fp = {1: -128, 2: -32768, 4: -2_147_483_648}[word_size]
    data = build_sframe(version, AMD64, [fde(0x10000, limit + 8, [
        fre(0, [8]), fre(limit, [cfa, fp], base="fp", word_size=word_size)], fre_size=fre_size)],
        fixed_ra=-8, address=0x400000)
    section = section_of(data, 0x400000)
    (only,) = section.fdes
    assert only.fre_type == fre_size
    first, second = section.fres(only)
    assert second.start_offset == limit and second.start_address == 0x10000 + limit
    assert second.data_word_size == word_size and second.words == [cfa, fp]
    assert second.cfa_base == "fp" and second.cfa_offset == cfa and second.fp_offset == fp
    assert second.offset == first.offset + fre_size + 1 + 1
    row = section.row(only, second)
    assert (row.cfa.register, row.cfa.offset) == (X86.fp, cfa)
    assert row.registers[X86.fp] == type(row.registers[X86.fp])(RuleKind.OFFSET, offset=fp)
    assert (row.address, row.end) == (0x10000 + limit, 0x10000 + limit + 8)
    assert section.find(0x10000 + limit - 1)[2] is first
    assert section.find(0x10000 + limit)[2] is second


def test_amd64_rows():
    data = build_sframe(3, AMD64, [fde(0x1000, 0x20, [
        fre(0, [8]), fre(1, [16, -16]), fre(4, [16, -16], base="fp"), fre(0x1f, [8, -16])])],
        fixed_ra=-8)
    section = section_of(data)
    texts = [section.row(section.fdes[0], f).text(X86) for f in section.fres(section.fdes[0])]
    assert texts == ["CFA=rsp+8 => rip=[CFA-8]",
                     "CFA=rsp+16 => rbp=[CFA-16] rip=[CFA-8]",
                     "CFA=rbp+16 => rbp=[CFA-16] rip=[CFA-8]",
                     "CFA=rsp+8 => rbp=[CFA-16] rip=[CFA-8]"]
    rows = [section.row(section.fdes[0], f) for f in section.fres(section.fdes[0])]
    assert [(r.address, r.end) for r in rows] == [(0x1000, 0x1001), (0x1001, 0x1004),
                                                  (0x1004, 0x101f), (0x101f, 0x1020)]
    assert all(f.ra_offset is None for f in section.fres(section.fdes[0]))


# -- PC type MASK -----------------------------------------------------------

@pytest.mark.parametrize("version", [2, 3])
def test_mask_pc_type_repeats_every_rep_size(version):
    plt = fde(0x2000, 0x40, [fre(0, [8]), fre(0xb, [16])], pc_type="mask", rep_size=16)
    data = build_sframe(version, AMD64, [plt], fixed_ra=-8)
    section = section_of(data)
    (only,) = section.fdes
    assert only.pc_type == "mask" and only.rep_size == 16
    for block in range(4):
        base = 0x2000 + 16 * block
        assert section.find(base + 0xa)[2].start_offset == 0
        hit = section.find(base + 0xb)[2]
        assert hit.start_offset == 0xb and hit.cfa_offset == 16
        assert section.find(base + 0xf)[2] is hit
        row = section.row(only, hit, pc=base + 0xc)
        assert (row.address, row.end) == (base + 0xb, base + 16)
    assert section.find(0x2040) is None


def test_mask_with_rep_size_zero_is_a_decode_error_at_lookup():
    data = build_sframe(2, AMD64, [fde(0x2000, 0x40, [fre(0, [8])], pc_type="mask")], fixed_ra=-8)
    section = section_of(data)
    with pytest.raises(DecodeError) as err:
        section.find(0x2004)
    assert "repetition size" in err.value.cause and err.value.offset == section.fdes[0].offset


# -- flex FDEs (v3) -----------------------------------------------------------

def ctrl(reg=0, deref=False, reg_p=True):
    return reg << 3 | (2 if deref else 0) | (1 if reg_p else 0)


def test_flex_drap_with_padding_word():
    rbp, r10, rsp = 6, 10, 7
    fres = [
        fre(0, [ctrl(rsp), 8]),                                     # CFA = rsp+8
        fre(5, [ctrl(r10), 0]),                                     # CFA = r10
        fre(0x1e, [ctrl(r10), 0, 0, ctrl(rbp, deref=True), 0]),     # pad, FP = *(rbp)
        fre(0x22, [ctrl(rbp, deref=True), -16, 0, ctrl(rbp, deref=True), 0], word_size=2),
    ]
    data = build_sframe(3, AMD64, [fde(0x1200, 0x91, fres, fde_type="flex")], fixed_ra=-8)
    section = section_of(data)
    (only,) = section.fdes
    assert only.fde_type == "flex"
    decoded = section.fres(only)
    assert [f.cfa_base for f in decoded] == ["sp", "r10", "r10", "fp"]
    assert [f.ra_padding for f in decoded] == [False, False, True, True]
    last = decoded[3]
    assert (last.cfa.register, last.cfa.offset, last.cfa.deref, last.cfa.control) == \
        (rbp, -16, True, ctrl(rbp, deref=True))
    assert last.fp.base == "register" and last.fp.deref and last.fp.register == rbp
    assert last.fp_offset is None and last.ra is None
    row = section.row(only, last)
    assert (row.cfa.register, row.cfa.offset, row.cfa.deref) == (rbp, -16, True)
    assert row.cfa.text(X86) == "*(rbp-16)"
    assert row.registers[X86.ra].kind == RuleKind.OFFSET and row.registers[X86.ra].offset == -8
    fp_rule = row.registers[X86.fp]
    assert fp_rule.kind == RuleKind.EXPRESSION and fp_rule.expression == bytes([0x70 + rbp, 0])
    assert section.row(only, decoded[1]).cfa.text(X86) == "r10"


def test_flex_rules_for_ra_and_fp_in_every_form():
    x29, x19 = 29, 19
    fres = [
        fre(0, [ctrl(31), 0, ctrl(0, deref=True, reg_p=False), -8,      # RA = *(CFA-8)
                ctrl(0, deref=False, reg_p=False), -16]),               # FP = CFA-16 (value)
        fre(4, [ctrl(31), 16, ctrl(x19), 0, ctrl(x29, deref=True), 8]),  # RA in x19, FP = *(x29+8)
        fre(8, [ctrl(31), 16, ctrl(9), 4, ctrl(100), 0], word_size=2),  # RA = x9+4, FP in r100
    ]
    data = build_sframe(3, AARCH64_LE, [fde(0x9000, 0x10, fres, fde_type="flex")])
    section = section_of(data)
    rows = [section.row(section.fdes[0], f) for f in section.fres(section.fdes[0])]
    assert rows[0].registers[A64.ra] == type(rows[0].registers[A64.ra])(RuleKind.OFFSET, offset=-8)
    assert rows[0].registers[A64.fp].kind == RuleKind.VAL_OFFSET and rows[0].registers[A64.fp].offset == -16
    assert rows[1].registers[A64.ra].kind == RuleKind.REGISTER and rows[1].registers[A64.ra].register == x19
    assert rows[1].registers[A64.fp].kind == RuleKind.EXPRESSION
    assert rows[1].registers[A64.fp].expression == bytes([0x70 + x29, 8])
    assert rows[2].registers[A64.ra].kind == RuleKind.VAL_EXPRESSION
    assert rows[2].registers[A64.ra].expression == bytes([0x70 + 9, 4])
    assert rows[2].registers[A64.fp].kind == RuleKind.REGISTER and rows[2].registers[A64.fp].register == 100
    # A register number past 31 needs DW_OP_bregx in an expression.
    fres = [fre(0, [ctrl(31), 16, ctrl(40, deref=True), -300], word_size=2)]
    section = section_of(build_sframe(3, AARCH64_LE, [fde(0, 4, fres, fde_type="flex")]))
    rule = section.row(section.fdes[0], section.fres(section.fdes[0])[0]).registers[A64.ra]
    assert rule.kind == RuleKind.EXPRESSION and rule.expression == bytes([0x92, 40, 0xD4, 0x7D])


def test_flex_cfa_without_a_register_is_rejected():
    data = build_sframe(3, AMD64, [fde(0, 4, [fre(0, [ctrl(0, reg_p=False), 8])], fde_type="flex")],
                        fixed_ra=-8)
    section = section_of(data)
    with pytest.raises(DecodeError):
        section.fres(section.fdes[0])


def test_unknown_v3_fde_type_is_a_decode_error_when_interpreted():
    data = build_sframe(3, AMD64, [fde(0, 4, [fre(0, [8])], fde_type=7)], fixed_ra=-8)
    section = section_of(data)
    assert section.fdes[0].fde_type == "type-7"
    with pytest.raises(DecodeError) as err:
        section.find(0)
    assert "FDE type 7" in err.value.cause


# -- AArch64 ------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2, 3])
def test_aarch64_key_b_and_signed_return_address(version):
    fres = [fre(0, [0]), fre(4, [32, -24, -32], mangled=True), fre(0x20, [0], mangled=True)]
    data = build_sframe(version, AARCH64_LE, [fde(0x400000, 0x28, fres, key_b=True)])
    section = section_of(data)
    (only,) = section.fdes
    assert only.ra_mangled_key == "B"
    plain, framed, leaf = section.fres(only)
    assert not plain.ra_mangled and framed.ra_mangled
    assert framed.ra_offset == -24 and framed.fp_offset == -32
    assert any("strip" in note and "key B" in note for note in framed.notes)
    row = section.row(only, framed)
    assert row.ra_signed
    assert row.registers[A64.ra].offset == -24 and row.registers[A64.fp].offset == -32
    leaf_row = section.row(only, leaf)
    assert leaf_row.ra_signed and leaf_row.registers[A64.ra].kind == RuleKind.SAME
    assert A64.fp not in leaf_row.registers


def test_aarch64_key_a_is_the_default():
    data = build_sframe(2, AARCH64_LE, [fde(0, 8, [fre(0, [16, -8, -16], mangled=True)])])
    section = section_of(data)
    assert section.fdes[0].ra_mangled_key == "A"
    assert "key A" in section.fres(section.fdes[0])[0].notes[0]


def test_key_is_none_off_aarch64():
    data = build_sframe(2, AMD64, [fde(0, 8, [fre(0, [8])], key_b=True)], fixed_ra=-8)
    assert section_of(data).fdes[0].ra_mangled_key is None


# -- s390x ---------------------------------------------------------------------

def test_s390x_cfa_scaling_sp_and_register_saves_v2():
    # CFA offset stored as (offset - 160) / 8; odd RA/FP words are 2*reg+1.
    fres = [fre(0, [0]), fre(6, [0, -48, -72]), fre(10, [22, -48, -72]),
            fre(14, [22, 0, -72], base="fp"), fre(18, [0, 2 * 16 + 1, 2 * 17 + 1])]
    data = build_sframe(2, S390X, [fde(0x1000000, 0x20, fres)], byteorder="big")
    section = section_of(data, byteorder="big")
    only = section.fdes[0]
    entry, saved, grown, padded, in_regs = section.fres(only)
    assert [f.cfa_offset for f in (entry, saved, grown)] == [160, 160, 336]
    assert saved.ra_offset == -48 and saved.fp_offset == -72
    assert padded.ra_padding and padded.ra is None and padded.fp_offset == -72
    assert in_regs.ra_register == 16 and in_regs.fp_register == 17
    rows = [section.row(only, f) for f in (entry, saved, padded, in_regs)]
    for row in rows:
        assert row.registers[Z.sp].kind == RuleKind.VAL_OFFSET and row.registers[Z.sp].offset == -160
    assert rows[0].registers[Z.ra].kind == RuleKind.SAME and Z.fp not in rows[0].registers
    assert rows[1].registers[Z.ra].offset == -48 and rows[1].registers[Z.fp].offset == -72
    assert rows[2].registers[Z.ra].kind == RuleKind.SAME and rows[2].cfa.register == Z.fp
    assert rows[3].registers[Z.ra] == type(rows[3].registers[Z.ra])(RuleKind.REGISTER, register=16)
    assert rows[3].registers[Z.fp].register == 17


def test_s390x_v3_odd_words_are_offsets_not_registers():
    data = build_sframe(3, S390X, [fde(0x1000000, 0x20, [fre(0, [0, -47, -71])])],
                        byteorder="big")
    section = section_of(data)
    only = section.fres(section.fdes[0])[0]
    assert only.ra_offset == -47 and only.fp_offset == -71


# -- signal frames, outermost frames ---------------------------------------------

def test_signal_frame_bit_is_v3_only():
    fdes = [fde(0x1000, 0x10, [fre(0, [8])], signal=True), fde(0x1010, 0x10, [fre(0, [8])])]
    v3 = section_of(build_sframe(3, AMD64, fdes, fixed_ra=-8))
    assert [f.signal_frame for f in v3.fdes] == [True, False]
    v2 = section_of(build_sframe(2, AMD64, fdes, fixed_ra=-8))
    assert [f.signal_frame for f in v2.fdes] == [False, False]


def test_outermost_frames():
    fdes = [fde(0x1000, 0x10, []),                                   # v3: no FREs
            fde(0x1010, 0x10, [fre(0, [8]), fre(4, [])])]            # zero data words
    section = section_of(build_sframe(3, AMD64, fdes, fixed_ra=-8))
    first, second = section.fdes
    assert first.outermost and not second.outermost
    index, found, nothing = section.find(0x1008)
    assert (index, found, nothing) == (0, first, None)
    row = section.row(first, None)
    assert row.registers[X86.ra].kind == RuleKind.UNDEFINED and (row.address, row.end) == (0x1000, 0x1010)
    index, found, last = section.find(0x1018)
    assert last.outermost and last.cfa is None and last.cfa_offset is None
    assert section.row(second, last).registers[X86.ra].kind == RuleKind.UNDEFINED
    assert section.find(0x1012)[2].cfa_offset == 8
    with pytest.raises(ValueError):
        section.row(second, None)


def test_v2_fde_without_fres_is_not_outermost():
    section = section_of(build_sframe(2, AMD64, [fde(0x1000, 0x10, [])], fixed_ra=-8))
    assert not section.fdes[0].outermost and section.find(0x1004) is None


def test_pc_before_first_fre_finds_nothing():
    section = section_of(build_sframe(2, AMD64, [fde(0x1000, 0x10, [fre(4, [8])])], fixed_ra=-8))
    assert section.find(0x1002) is None and section.find(0x1004) is not None


# -- FDE lookup -------------------------------------------------------------------

def _functions(count, order):
    return [fde(0x10000 + 0x100 * i, 0x80, [fre(0, [8 + 8 * (i % 5)])]) for i in order(range(count))]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_binary_and_linear_lookup_agree(version):
    sorted_data = build_sframe(version, AMD64, _functions(50, list), flags=0x5, fixed_ra=-8)
    unsorted_data = build_sframe(version, AMD64, _functions(50, lambda r: list(r)[::-1]),
                                 flags=0x4, fixed_ra=-8)
    by_binary, by_linear = section_of(sorted_data), section_of(unsorted_data)
    assert (by_binary.lookup, by_linear.lookup) == ("binary", "linear")
    for pc in range(0xFF00, 0x10000 + 0x100 * 51, 0x31):
        a, b = by_binary.find(pc), by_linear.find(pc)
        assert (a is None) == (b is None), hex(pc)
        if a:
            assert a[1].start == b[1].start and a[2].cfa_offset == b[2].cfa_offset
            assert a[0] == (pc - 0x10000) // 0x100 and b[0] == 49 - a[0]
    assert by_binary.find(0x10000 + 0x80) is None       # the gap between functions


def test_sorted_flag_on_unsorted_fdes_falls_back_to_linear():
    data = build_sframe(2, AMD64, _functions(10, lambda r: list(r)[::-1]), flags=0x5, fixed_ra=-8)
    section = section_of(data)
    assert section.sorted and section.lookup == "linear"
    assert section.find(0x10000 + 0x305)[0] == 6


def test_functions_sharing_a_start():
    fdes = [fde(0x1000, 0, [fre(0, [8])]), fde(0x1000, 0x10, [fre(0, [16])]),
            fde(0x1010, 0, [fre(0, [8])])]
    section = section_of(build_sframe(3, AMD64, fdes, fixed_ra=-8))
    assert section.lookup == "binary"
    assert section.find(0x1004)[0] == 1
    assert section.find(0x1010) is None


def test_reading_through_target_memory_and_its_failures():
    data = build_sframe(3, AMD64, _functions(200, list), fixed_ra=-8, address=0x5000)
    reads = []

    def fetch(address, size):
        reads.append((address, size))
        return data[address - 0x5000:address - 0x5000 + size]

    section = SFrameSection(Region(".sframe", 0x5000, len(data), fetch))
    assert section.find(0x10000 + 0x100 * 150 + 3)[0] == 150
    assert all(size <= 4096 for _, size in reads)

    def broken(address, size):
        raise MemoryReadError(address, size)

    with pytest.raises(DecodeError) as err:
        SFrameSection(Region(".sframe", 0x5000, len(data), broken))
    assert err.value.section == ".sframe" and "cannot read" in err.value.cause


# -- bad input ------------------------------------------------------------------

GOOD = build_sframe(3, AMD64, [fde(0x1000, 0x10, [fre(0, [8]), fre(4, [16, -16])]),
                               fde(0x1010, 0x10, [fre(0, [8])])], fixed_ra=-8)
GOOD_V2 = build_sframe(2, AMD64, [fde(0x1000, 0x10, [fre(0, [8]), fre(4, [16, -16])])], fixed_ra=-8)


def _patch(data, offset, fmt, value):
    data = bytearray(data)
    struct.pack_into("<" + fmt, data, offset, value)
    return bytes(data)


def _decode_everything(data, address=0):
    section = section_of(data, address)
    for f in section.fdes:
        for r in section.fres(f):
            section.row(f, r)
    for pc in (0, 0x1000, 0x1004, 0x1014):
        section.find(pc)
    return section


BAD_INPUTS = {
    "empty": (b"", 0, "too short"),
    "truncated header": (GOOD[:20], 0, "shorter than"),
    "bad magic": (b"\x12\x34" + GOOD[2:], 0, "bad magic"),
    "unknown version": (GOOD[:2] + b"\x09" + GOOD[3:], 2, "unknown SFrame version 9"),
    "unknown abi": (GOOD[:4] + b"\x07" + GOOD[5:], 4, "unknown ABI"),
    "aux header past end": (_patch(GOOD, 7, "B", 255), 7, "auxiliary header"),
    "num_fdes too large": (_patch(GOOD, 8, "I", 0x10000000), 8, "FDEs"),
    "num_fres too large": (_patch(GOOD, 12, "I", 0x10000000), 12, "FREs cannot fit"),
    "fre_len past end": (_patch(GOOD, 16, "I", 0x1000), 16, "FRE sub-section"),
    "fdeoff past end": (_patch(GOOD, 20, "I", 0x1000), 8, "run past the end"),
    "freoff past end": (_patch(GOOD, 24, "I", 0x1000), 16, "runs past the end"),
    "FDE fre offset past end": (_patch(GOOD, 28 + 12, "I", 0x5000), 28, "points past"),
    "v3 attr num_fres too large": (_patch(GOOD, 28 + 32, "H", 0xFFFF), 28, "cannot fit"),
    "v2 FDE num_fres too large": (_patch(GOOD_V2, 28 + 12, "I", 0xFFFFFFFF), 28, "cannot fit"),
    "unknown FRE type": (_patch(GOOD_V2, 28 + 16, "B", 0x07), 28, "unknown FRE type"),
    "data word size code 3": (_patch(GOOD_V2, 28 + 20 + 1, "B", 0x63), 48, "data-word size"),
    "FRE words past the end": (_patch(GOOD_V2, 28 + 20 + 4, "B", 0x5F), 51, "runs past"),
}


# The kind of each (plugin.errors.DecodeKind): what is wrong, not only where.
BAD_KINDS = {"bad magic": DecodeKind.MALFORMED, "unknown version": DecodeKind.UNSUPPORTED,
             "unknown abi": DecodeKind.UNSUPPORTED, "unknown FRE type": DecodeKind.UNSUPPORTED,
             "data word size code 3": DecodeKind.UNSUPPORTED, "FDE fre offset past end": DecodeKind.MALFORMED}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_raises_decode_error_with_section_offset_and_cause(name):
    data, offset, cause = BAD_INPUTS[name]
    with pytest.raises(DecodeError) as err:
        _decode_everything(data)
    assert err.value.section == ".sframe"
    assert err.value.offset == offset, err.value
    assert cause in err.value.cause, err.value
    assert err.value.kind == BAD_KINDS.get(name, DecodeKind.TRUNCATED), err.value


def test_bad_inputs_are_bad_only_where_patched():
    _decode_everything(GOOD)
    _decode_everything(GOOD_V2)


# -- random input ------------------------------------------------------------------

SEEDS = [GOOD, GOOD_V2,
         build_sframe(1, AARCH64_BE, [fde(0, 0x40, [fre(0, [0]), fre(4, [32, -32, -24])])],
                      flags=0, byteorder="big"),
         build_sframe(3, S390X, [fde(0x1000000, 0x1a, [fre(0, [ctrl(15), 0]),
                                                       fre(4, [ctrl(15), 0, ctrl(16), 0])],
                                     fde_type="flex")], byteorder="big"),
         build_sframe(2, AMD64, [fde(0x2000, 0x40, [fre(0, [8]), fre(0xb, [16])],
                                     pc_type="mask", rep_size=16)], fixed_ra=-8)]


def _exercise(data, address, pcs):
    try:
        section = section_of(data, address)
        for f in section.fdes:
            for r in section.fres(f):
                section.row(f, r, pc=r.start_address)
        for pc in pcs:
            found = section.find(pc)
            if found is not None:
                index, f, r = found
                section.row(f, r, pc=pc)
    except DecodeError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 2**64 - 1),
       st.lists(st.integers(0, 2**64 - 1), max_size=5))
def test_random_bytes_give_only_decode_error(data, address, pcs):
    _exercise(data, address, pcs)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)),
                                        min_size=1, max_size=8),
       st.integers(0, 8), st.lists(st.integers(0, 0x1000100), max_size=5))
def test_mutated_sections_give_only_decode_error(seed, edits, cut, pcs):
    data = bytearray(seed)
    for position, value in edits:
        if position < len(data):
            data[position] = value
    data = bytes(data[:len(data) - cut] if cut else data)
    _exercise(data, 0, pcs + [0x1000, 0x1004, 0x2004, 0x100000c])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))
def test_huge_counts_terminate_quickly(num_fdes_low, num_fres, fre_off):
    data = _patch(_patch(GOOD_V2, 28 + 12, "I", num_fres), 28 + 8, "I", fre_off)
    data = _patch(data, 8, "I", num_fdes_low)
    _exercise(data, 0, [0x1000])
