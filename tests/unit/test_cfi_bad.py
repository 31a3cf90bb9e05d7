"""Bad input: each case must be a DecodeError naming the section, the offset
of what is wrong and the cause; nothing else may escape."""

import struct

import pytest

from plugin.arch import x86_64
from plugin.errors import DecodeError, DecodeKind
from plugin.formats.cfi import CfiSection, EhFrameHdr, execute, execute_contained, row_at
from plugin.memory import Region
from cfi_builder import X86_RBP, X86_RIP, X86_RSP, Builder, hdr_bytes, uleb

X86 = x86_64.ARCH
CIE_PROGRAM = bytes([0x0C, X86_RSP, 8, 0x80 | X86_RIP, 1])


def decode_all(section):
    for entry in section.entries():
        if hasattr(entry, "start"):
            execute(entry, X86)


def expect(section, offset, *words, run=decode_all):
    with pytest.raises(DecodeError) as err:
        run(section)
    assert err.value.section == section.name
    assert err.value.offset == offset, err.value
    for word in words:
        assert word in err.value.cause, err.value
    return err.value


def section_of(b, kind=None):
    return CfiSection(b.region(), kind or b.kind, X86)


def expect_bad_cie(offset, *words, program=CIE_PROGRAM, **cie_args):
    """A section of one CIE built from cie_args must fail at offset, with words in the cause."""
    b = Builder()
    b.cie(program, **cie_args)
    expect(section_of(b), offset, *words)


def fde_program(program, cie_program=CIE_PROGRAM, **cie_args):
    """(section, FDE instructions offset) for one FDE running `program`."""
    b = Builder()
    cie = b.cie(cie_program, **cie_args)
    fde = b.fde(cie, 0x1000, 0x100, program)
    b.terminator()
    section = section_of(b)
    return section, section.fde_at(fde).instructions_offset


# --- structure ----------------------------------------------------------------------------

def test_truncated_section():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    fde = b.fde(cie, 0x1000, 0x100, bytes([0x41, 0x0E, 16]))
    data = bytes(b.data[:fde + 10])                  # cut inside the FDE
    section = CfiSection(Region.from_bytes(".eh_frame", 0, data), "eh_frame", X86)
    err = expect(section, fde, "runs past the end of the section")
    assert str(err).startswith(".eh_frame+0x%x:" % fde)


def test_section_ending_inside_a_length_field():
    section = CfiSection(Region.from_bytes(".eh_frame", 0, b"\x10\x00"), "eh_frame", X86)
    expect(section, 0, "entry header")


def test_length_past_the_end():
    b = Builder()
    b.cie(CIE_PROGRAM)
    b.raw(struct.pack("<I", 0x1000) + b"\0" * 12)
    expect(section_of(b), 0x18, "length 0x1000 runs past the end")


def test_64_bit_length_past_the_end():
    b = Builder("debug_frame")
    b.raw(struct.pack("<IQ", 0xFFFFFFFF, 2 ** 63) + b"\0" * 8)
    expect(section_of(b), 0, "runs past the end")


def test_reserved_length():
    b = Builder()
    b.raw(struct.pack("<I", 0xFFFFFFF0) + b"\0" * 16)
    expect(section_of(b), 0, "reserved initial length")


def test_entry_too_short_for_its_id():
    b = Builder()
    b.raw(struct.pack("<I", 2) + b"\0\0")
    expect(section_of(b), 0, "too short")


def test_eh_frame_cie_pointer_before_the_section():
    b = Builder()
    b.cie(CIE_PROGRAM)
    fde = b.fde(0, 0x1000, 0x10, cie_pointer=0x100)        # field at 0x1c - 0x100 < 0
    expect(section_of(b), fde, "CIE pointer leads to offset -0xe4", "outside the section")


def test_debug_frame_cie_pointer_past_the_end():
    b = Builder("debug_frame")
    b.cie(CIE_PROGRAM, augmentation="")
    fde = b.fde(0, 0x1000, 0x10, cie_pointer=0x5000)
    expect(section_of(b), fde, "CIE pointer leads to offset 0x5000", "outside the section")


def test_cie_pointer_at_an_fde():
    b = Builder("debug_frame")
    cie = b.cie(CIE_PROGRAM, augmentation="")
    first = b.fde(cie, 0x1000, 0x10)
    second = b.fde(cie, 0x2000, 0x10, cie_pointer=first)
    expect(section_of(b), second, "points at an FDE")


def test_cie_pointer_into_the_middle_of_an_entry():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, 0x1000, 0x10)
    # Points 2 bytes into the CIE: the "length" read there runs off the end.
    fde = b.fde(cie, 0x2000, 0x10, cie_pointer=len(b.data) + 4 - 2)
    expect(section_of(b), fde, "CIE pointer 0x2")


def test_cie_pointer_at_a_zero_terminator():
    b = Builder("debug_frame")
    b.terminator()
    fde = b.fde(0, 0x1000, 0x10, cie_pointer=0)
    expect(section_of(b), fde, "zero-length")


def test_fde_at_a_cie_and_cie_at_an_fde():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    fde = b.fde(cie, 0x1000, 0x10)
    section = section_of(b)
    expect(section, cie, "expected an FDE", run=lambda s: s.fde_at(cie))
    expect(section, fde, "expected a CIE", run=lambda s: s.cie_at(fde))


def test_unsupported_cie_version():
    b = Builder()
    b.cie(CIE_PROGRAM, version=2)
    assert expect(section_of(b), 8, "unsupported CIE version 2").kind == DecodeKind.UNSUPPORTED


def test_unknown_augmentation_without_z():
    expect_bad_cie(9, "unknown augmentation 'X'", augmentation="X")


def test_augmentation_data_longer_than_the_entry():
    b = Builder()
    b.cie(b"", augmentation="zR", aug_data=bytes([0x1B]) + b"\0" * 3, pad=False)
    b.data[15] = 0x7F                                   # the augmentation length byte
    expect(section_of(b), 16, "augmentation data length 127")


def test_augmentation_fields_longer_than_their_length():
    # "zP" with 1 byte of augmentation data, but the P field needs 1 + 8.
    expect_bad_cie(9, "augmentation fields run past the augmentation data",
                   program=CIE_PROGRAM + b"\0" * 8, augmentation="zP", aug_data=bytes([0x00]))


def test_invalid_fde_pointer_encoding():
    expect_bad_cie(16, "invalid FDE pointer encoding 0x07", fde_encoding=0x07)


def test_fde_range_past_the_entry():
    b = Builder()
    cie = b.cie(CIE_PROGRAM, augmentation="zR", fde_encoding=0x04)   # udata8 start and range
    fde = len(b.data)
    b.raw(struct.pack("<II", 12, fde + 4 - cie) + struct.pack("<Q", 0x1000) + b"\0" * 4)
    # The range field runs past the entry but not past the section ...
    b.terminator()
    b.raw(b"\0" * 8)
    expect(section_of(b), fde + 8, "FDE address range", "past the end of the entry")
    # ... and, with nothing after the entry, past the section.
    b.data[:] = b.data[:fde + 20]
    expect(section_of(b), fde + 16, "runs past the end")


# --- the CFA program -------------------------------------------------------------------

@pytest.mark.parametrize("opcode", [0x17, 0x1C, 0x1E, 0x30, 0x3F])
def test_unknown_opcode(opcode):
    section, base = fde_program(bytes([0x41, opcode]))
    assert expect(section, base + 1, "unknown CFA opcode 0x%02x" % opcode).kind == DecodeKind.UNSUPPORTED


def test_unknown_opcode_in_a_cie():
    b = Builder()
    b.cie(CIE_PROGRAM + bytes([0x3E]))
    b.fde(0, 0x1000, 0x10)
    cie = section_of(b).cie_at(0)
    expect(section_of(b), cie.instructions_offset + 5, "unknown CFA opcode 0x3e")


def test_restore_state_with_empty_stack():
    section, base = fde_program(bytes([0x41, 0x0A, 0x41, 0x0B, 0x41, 0x0B]))
    expect(section, base + 5, "DW_CFA_restore_state", "no remembered state")


def test_cfa_offset_when_the_cfa_is_an_expression():
    section, base = fde_program(bytes([0x0F, 2, 0x77, 0x08, 0x41, 0x0E, 16]))
    expect(section, base + 5, "DW_CFA_def_cfa_offset", "expression")
    section, base = fde_program(bytes([0x0F, 1, 0x30, 0x13, 0x7E]))
    expect(section, base + 3, "DW_CFA_def_cfa_offset_sf", "expression")


def test_cfa_register_when_the_cfa_is_an_expression_keeps_the_last_offset():
    # libgcrypt's hand-written CFI: def_cfa_offset 56, def_cfa_expression,
    # then def_cfa_register rsp. libgcc, GDB and readelf keep the offset 56.
    program = bytes([0x41, 0x0E, 56, 0x41, 0x0F, 1, 0x30, 0x41, 0x0D, X86_RSP])
    section, base = fde_program(program)
    rows = execute(section.fdes()[0], X86)
    assert [r.address for r in rows] == [0x1000, 0x1001, 0x1002, 0x1003]
    assert (rows[3].cfa.register, rows[3].cfa.offset) == (X86_RSP, 56)
    assert "kept the previous offset 56" in rows[3].note
    assert "+0x%x" % (base + 8) in rows[3].note
    assert rows[3].note in rows[3].text(X86) and rows[3].to_json(X86)["note"] == rows[3].note
    assert not rows[2].note and row_at(section.fdes()[0], 0x1003, X86).note == rows[3].note


def test_cfa_offset_with_no_cfa():
    section, base = fde_program(bytes([0x0E, 16]), cie_program=b"")
    expect(section, base, "DW_CFA_def_cfa_offset", "undefined")


def test_set_loc_going_backwards():
    b = Builder("debug_frame")
    cie = b.cie(CIE_PROGRAM, augmentation="")
    program = bytes([0x01]) + struct.pack("<Q", 0x1080) + bytes([0x01]) + struct.pack("<Q", 0x1040)
    fde = b.fde(cie, 0x1000, 0x100, program)
    section = section_of(b)
    base = section.fde_at(fde).instructions_offset
    expect(section, base + 9, "DW_CFA_set_loc", "moves back")
    b2 = Builder("debug_frame")
    cie = b2.cie(CIE_PROGRAM, augmentation="")
    fde = b2.fde(cie, 0x1000, 0x100, bytes([0x01]) + struct.pack("<Q", 0xFFF))
    section = section_of(b2)
    expect(section, section.fde_at(fde).instructions_offset, "moves back")


def test_advance_in_a_cie():
    b = Builder()
    b.cie(CIE_PROGRAM + bytes([0x41]))
    b.fde(0, 0x1000, 0x10)
    offset = section_of(b).cie_at(0).instructions_offset + 5
    expect(section_of(b), offset, "DW_CFA_advance_loc in a CIE")


def test_operands_running_off_the_end():
    cases = [
        (bytes([0x0C, 0x87]), "DW_CFA_def_cfa", "LEB128"),           # unfinished ULEB
        (bytes([0x10, 3, 5, 0x77]), "DW_CFA_expression", "runs past"),
        (bytes([0x0F, 0x20, 0x77]), "DW_CFA_def_cfa_expression", "runs past"),
        (bytes([0x03, 0x01]), "DW_CFA_advance_loc2", "runs past"),
        (bytes([0x04, 0x01, 0, 0]), "DW_CFA_advance_loc4", "runs past"),
        (bytes([0x80 | 3]), "DW_CFA_offset", "LEB128"),
    ]
    for program, name, word in cases:
        b = Builder()
        cie = b.cie(CIE_PROGRAM)
        fde = b.fde(cie, 0x1000, 0x100, program, pad=False)
        section = section_of(b)
        base = section.fde_at(fde).instructions_offset
        assert expect(section, base, name, word).kind == DecodeKind.TRUNCATED


def test_overlong_leb128():
    section, base = fde_program(bytes([0x41, 0x0E]) + b"\x80" * 100 + b"\x01")
    assert expect(section, base + 1, "too long").kind == DecodeKind.LIMIT


def test_set_loc_operand_running_off_the_end():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    fde = b.fde(cie, 0x1000, 0x100, bytes([0x01, 0x10, 0x00]), pad=False)
    b.terminator()
    section = section_of(b)
    base = section.fde_at(fde).instructions_offset
    expect(section, base, "DW_CFA_set_loc", "runs past")


def test_remember_state_nested_too_deep():
    section, base = fde_program(bytes([0x0A]) * 1001)
    assert expect(section, base + 1000, "nested deeper").kind == DecodeKind.LIMIT


def test_negate_ra_state_with_pc_off_aarch64():
    section, base = fde_program(bytes([0x2C]))
    expect(section, base, "0x2c")


def test_row_at_reports_the_same_errors():
    section, base = fde_program(bytes([0x0B]))
    fde = section.fdes()[0]
    with pytest.raises(DecodeError) as err:
        row_at(fde, fde.start, X86)
    assert (err.value.section, err.value.offset) == (".eh_frame", base)


def test_a_bad_length_ends_the_walk_but_keeps_what_came_before():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, 0x1000, 0x10)
    bad = len(b.data)
    b.raw(struct.pack("<I", 0x1000))
    section = section_of(b)
    assert section.find_fde(0x1000).start == 0x1000
    [err] = section.bad_entries()
    assert err.offset == bad and "runs past the end" in err.cause
    with pytest.raises(DecodeError):
        list(section.entries())


def test_a_bad_entry_costs_only_itself():
    # FDE 2 names an unknown pointer encoding through its own CIE; FDE 3 is
    # bad only in its instructions (its rows up to the bad opcode remain).
    b = Builder()
    good = b.cie(CIE_PROGRAM)
    b.fde(good, 0x1000, 0x10)
    bad_cie = len(b.data)
    b.raw(struct.pack("<IIB", 8, 0, 9) + b"zR\0")       # version 9: not a CIE version
    b.fde(good, 0x2000, 0x10, bytes([0x41, 0x0E, 16, 0x41, 0x2C]))
    b.fde(good, 0x3000, 0x10)
    b.terminator()
    section = section_of(b)
    assert [f.start for f in section.fdes()] == [0x1000, 0x2000, 0x3000]
    [err] = section.bad_entries()
    assert err.offset == bad_cie + 8           # its version byte
    rows, err = execute_contained(section.fdes()[1], X86)
    assert [(r.address, r.end) for r in rows] == [(0x2000, 0x2001), (0x2001, 0x2002)]
    assert "0x2c" in err.cause                  # rows from 0x2002 on are unknown
    assert execute_contained(section.fdes()[2], X86)[1] is None


# --- .eh_frame_hdr -------------------------------------------------------------------------

def hdr(data, address=0x1000):
    return EhFrameHdr(Region.from_bytes(".eh_frame_hdr", address, data), X86)


def test_hdr_bad_version():
    with pytest.raises(DecodeError) as err:
        hdr(bytes([2, 0x1B, 0x03, 0x3B]) + b"\0" * 8)
    assert (err.value.section, err.value.offset) == (".eh_frame_hdr", 0)
    assert "version 2" in err.value.cause


def test_hdr_truncated():
    for size in range(0, 8):
        data = hdr_bytes([(0x10, 0x20)], 0x1000, 0x2000)[:size]
        with pytest.raises(DecodeError) as err:
            hdr(data)
        assert err.value.section == ".eh_frame_hdr"


def test_hdr_unknown_pointer_encoding():
    with pytest.raises(DecodeError) as err:
        hdr(bytes([1, 0x07, 0x03, 0x3B]) + b"\0" * 8)
    assert err.value.offset == 4 and "0x07" in err.value.cause


def find_fde_through_hdr(fde_address):
    """The DecodeError of looking up pc 0x10000 (an FDE of an .eh_frame at 0x200000)
    through an .eh_frame_hdr whose one entry says the FDE is at fde_address."""
    b = Builder(address=0x200000)
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, 0x10000, 0x10)
    section = section_of(b)
    header = hdr(hdr_bytes([(0x10000, fde_address)], 0x100000, 0x200000), 0x100000)
    with pytest.raises(DecodeError) as err:
        section.find_fde(0x10000, header)
    return err.value


def test_hdr_pointing_outside_eh_frame():
    error = find_fde_through_hdr(0x900000)
    assert error.section == ".eh_frame_hdr" and "outside .eh_frame" in error.cause


def test_hdr_pointing_at_a_cie():
    error = find_fde_through_hdr(0x200000)
    assert (error.section, error.offset) == (".eh_frame", 0)
    assert "expected an FDE" in error.cause


def test_uleb_helper_sanity():
    assert uleb(300) == b"\xac\x02"


def test_program_whose_rows_would_copy_too_many_rules():
    # 3000 registers with rules, then 2000 one-byte advances: 6 million rule
    # copies for 2000 rows. Refused instead of eating memory.
    program = b"".join(bytes([0x05]) + uleb(200 + n) + bytes([1]) for n in range(3000))
    program += bytes([0x41]) * 2000
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    fde = b.fde(cie, 0x1000, 0x10000, program)
    section = section_of(b)
    with pytest.raises(DecodeError) as err:
        execute(section.fde_at(fde), X86)
    assert "program too large" in err.value.cause


def test_row_without_a_cfa_rule():
    # No DW_CFA_def_cfa anywhere: the only row has no CFA.
    section, base = fde_program(bytes([0x86, 2]), cie_program=b"")
    fde = section.fdes()[0]
    expect(section, fde.offset, "no CFA rule")
    # Defined only after the first advance: the first row has none.
    section, base = fde_program(bytes([0x41, 0x0C, X86_RSP, 8]), cie_program=b"")
    expect(section, base, "row at 0x1000 has no CFA rule")
    with pytest.raises(DecodeError):
        row_at(section.fdes()[0], 0x1000, X86)
