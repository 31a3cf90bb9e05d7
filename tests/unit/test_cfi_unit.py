"""Unit tests of plugin/formats/cfi.py on hand-assembled sections.

Each test spells out the bytes it feeds in; test_cfi_asm.Builder only adds
lengths, CIE pointers and padding.
"""

import struct

import pytest

from plugin.arch import aarch64, i386, s390x, x86_64
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats.cfi import (CIE, FDE, CfiSection, EhFrameHdr, describe, execute,
                                row_at)
from plugin.memory import PAGE, Region
from plugin.model.rules import CfaRule, Rule, RuleKind
from cfi_builder import (X86_RBP, X86_RBX, X86_RIP, X86_RSP, Builder, counting_region,
                         encode_pointer, hdr_bytes, sleb, uleb)

X86 = x86_64.ARCH
RSP, RBP, RBX, RIP = X86_RSP, X86_RBP, X86_RBX, X86_RIP
R12 = 12

# The usual x86_64 CIE program: CFA = rsp+8, return address at CFA-8.
CIE_PROGRAM = bytes([0x0C, RSP, 8, 0x80 | RIP, 1])
START = 0x1000
SIZE = 0x100


def cfa(register, offset):
    return CfaRule("register", register=register, offset=offset)


def at(offset):
    return Rule(RuleKind.OFFSET, offset=offset)


def one_fde(program, cie_program=CIE_PROGRAM, *, arch=X86, kind="eh_frame", start=START,
            size=SIZE, **cie_args):
    b = Builder(kind)
    cie = b.cie(cie_program, **cie_args)
    b.fde(cie, start, size, program)
    section = CfiSection(b.region(), kind, arch)
    return section.fdes()[0]


def rows_of(program, cie_program=CIE_PROGRAM, **kw):
    arch = kw.get("arch", X86)
    return execute(one_fde(program, cie_program, **kw), arch)


def spans(rows):
    return [(r.address, r.end) for r in rows]


# --- CIE and FDE fields ---------------------------------------------------------

def test_cie_and_fde_fields_of_a_plain_eh_frame():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    fde = b.fde(cie, 0x1234, 0x56, bytes([0x41, 0x0E, 16]))
    b.terminator()
    section = CfiSection(b.region(), "eh_frame", X86)
    entries = list(section.entries())
    assert [type(e) for e in entries] == [CIE, FDE]
    c, f = entries
    assert (c.offset, c.version, c.augmentation, c.code_align, c.data_align, c.ra_register) == \
        (0, 1, "zR", 1, -8, RIP)
    assert (c.address_size, c.segment_size, c.fde_encoding, c.lsda_encoding) == (8, 0, 0x1B, 0xFF)
    assert c.personality is None and not c.signal_frame and not c.is_64
    assert c.instructions.startswith(CIE_PROGRAM)
    assert b.data[c.instructions_offset:c.instructions_offset + 5] == CIE_PROGRAM
    assert (f.offset, f.cie, f.start, f.end, f.lsda) == (fde, c, 0x1234, 0x1234 + 0x56, None)
    assert f.instructions.startswith(bytes([0x41, 0x0E, 16]))
    assert f.length == len(b.data) - 4 - fde - 4
    assert section.cie_at(0) is c and section.fde_at(fde) is f
    assert section.fdes() == [f]


def test_zero_terminator_ends_eh_frame_and_what_follows_is_ignored():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, START, SIZE)
    b.terminator()
    b.raw(b"\xff" * 7)                        # junk after the terminator
    section = CfiSection(b.region(), "eh_frame", X86)
    assert len(section.fdes()) == 1


def test_zero_length_in_debug_frame_is_padding():
    b = Builder("debug_frame")
    cie = b.cie(CIE_PROGRAM, augmentation="")
    b.terminator()
    b.fde(cie, START, SIZE)
    section = CfiSection(b.region(), "debug_frame", X86)
    assert [f.start for f in section.fdes()] == [START]


def test_cie_versions_1_3_4():
    # v1: return-address column is one byte.
    fde = one_fde(b"", version=1, ra=RIP)
    assert (fde.cie.version, fde.cie.ra_register) == (1, RIP)
    # v3: ULEB128 column, here one that needs two bytes.
    fde = one_fde(b"", version=3, ra=200)
    assert (fde.cie.version, fde.cie.ra_register) == (3, 200)
    # v4 (.debug_frame): explicit address and segment sizes.
    b = Builder("debug_frame", address_size=4)
    cie = b.cie(bytes([0x0C, 4, 4]), version=4, augmentation="", address_size=4,
                segment_size=2, data_align=-4, ra=8)
    b.fde(cie, 0x8048000, 0x40, bytes([0x41, 0x0E, 8]), segment=b"\x07\x00")
    section = CfiSection(b.region(), "debug_frame", i386.ARCH)
    f = section.fdes()[0]
    assert (f.cie.version, f.cie.address_size, f.cie.segment_size) == (4, 4, 2)
    assert (f.start, f.end) == (0x8048000, 0x8048040)
    assert spans(execute(f, i386.ARCH)) == [(0x8048000, 0x8048001), (0x8048001, 0x8048040)]


def test_cie_version_4_address_size_drives_absptr_width():
    b = Builder("debug_frame", address_size=4)
    cie = b.cie(CIE_PROGRAM, version=4, augmentation="", address_size=4)
    b.fde(cie, 0x4000, 0x10)
    # The section belongs to a 64-bit arch, but the CIE says 4-byte addresses.
    f = CfiSection(b.region(), "debug_frame", X86).fdes()[0]
    assert (f.start, f.end) == (0x4000, 0x4010)


def test_64_bit_lengths_in_eh_frame_keep_a_4_byte_cie_pointer():
    b = Builder()
    cie = b.cie(CIE_PROGRAM, is_64=True)
    b.fde(cie, START, SIZE, bytes([0x41, 0x0E, 16]), is_64=True)
    b.terminator()
    section = CfiSection(b.region(), "eh_frame", X86)
    c, f = list(section.entries())
    assert c.is_64 and f.is_64 and f.cie is c
    assert spans(execute(f, X86)) == [(START, START + 1), (START + 1, START + SIZE)]


def test_debug_frame_dwarf64_and_absolute_cie_pointer():
    b = Builder("debug_frame")
    first = b.cie(CIE_PROGRAM, augmentation="", is_64=True)
    second = b.cie(bytes([0x0C, RBP, 16]), augmentation="")
    b.fde(second, 0x2000, 0x10, is_64=True)
    b.fde(first, 0x3000, 0x10)
    section = CfiSection(b.region(), "debug_frame", X86)
    f1, f2 = section.fdes()
    assert f1.cie.offset == second and f1.is_64 and not f1.cie.is_64
    assert f2.cie.offset == first and f2.cie.is_64
    assert execute(f1, X86)[0].cfa == cfa(RBP, 16)
    assert execute(f2, X86)[0].cfa == cfa(RSP, 8)


def test_debug_frame_fde_may_point_forward_to_its_cie():
    b = Builder("debug_frame")
    fde_offset = b.fde(0x28, START, SIZE, cie_pointer=0x28)
    assert fde_offset == 0 and len(b.data) < 0x28
    b.raw(b"\0" * (0x28 - len(b.data)))
    assert b.cie(CIE_PROGRAM, augmentation="") == 0x28
    f = CfiSection(b.region(), "debug_frame", X86).fde_at(0)
    assert f.cie.offset == 0x28


def test_bias_moves_fde_ranges_and_set_loc_targets():
    b = Builder("debug_frame")
    cie = b.cie(CIE_PROGRAM, augmentation="")
    b.fde(cie, 0x1000, 0x40, bytes([0x01]) + struct.pack("<Q", 0x1010) + bytes([0x0E, 16]))
    section = CfiSection(b.region(), "debug_frame", X86, bias=0x7F0000000000)
    f = section.fdes()[0]
    assert (f.start, f.end) == (0x7F0000001000, 0x7F0000001040)
    assert spans(execute(f, X86)) == [(0x7F0000001000, 0x7F0000001010),
                                      (0x7F0000001010, 0x7F0000001040)]
    assert section.find_fde(0x7F0000001020) is f and section.find_fde(0x1020) is None


# --- augmentations ----------------------------------------------------------------

def test_augmentation_zPLR_personality_and_lsda():
    b = Builder(address=0x10000)
    personality = 0x401234
    # 'P': encoding 0x00 (absptr), then the pointer; 'L': 0x1b; 'R': 0x1b.
    aug = bytes([0x00]) + struct.pack("<Q", personality) + bytes([0x1B, 0x1B])
    cie = b.cie(CIE_PROGRAM, augmentation="zPLR", aug_data=aug)
    # The LSDA is pcrel sdata4 relative to its own field: compute where that is.
    fde_offset = len(b.data)
    lsda_field = b.address + fde_offset + 4 + 4 + 4 + 4 + 1
    lsda_value = 0x20000
    b.fde(cie, START, SIZE, aug_data=encode_pointer(0x1B, lsda_value, lsda_field))
    section = CfiSection(b.region(), "eh_frame", X86)
    f = section.fdes()[0]
    assert f.cie.personality == personality and f.cie.personality_slot is None
    assert f.cie.lsda_encoding == 0x1B and f.cie.fde_encoding == 0x1B
    assert f.lsda == lsda_value


def test_indirect_personality_is_followed_through_deref_or_left_as_a_slot():
    b = Builder(address=0x10000)
    slot = 0x60000
    aug = bytes([0x80]) + struct.pack("<Q", slot) + bytes([0x1B])   # indirect absptr
    b.cie(CIE_PROGRAM, augmentation="zPR", aug_data=aug)
    memory = {slot: struct.pack("<Q", 0x4567)}

    def deref(address, size):
        if address not in memory:
            raise MemoryReadError(address, size)
        return memory[address][:size]

    with_memory = CfiSection(b.region(), "eh_frame", X86, deref=deref).cie_at(0)
    assert (with_memory.personality, with_memory.personality_slot) == (0x4567, slot)
    without = CfiSection(b.region(), "eh_frame", X86).cie_at(0)
    assert (without.personality, without.personality_slot) == (None, slot)
    memory.clear()
    unreadable = CfiSection(b.region(), "eh_frame", X86, deref=deref).cie_at(0)
    assert (unreadable.personality, unreadable.personality_slot) == (None, slot)


def test_augmentation_flags_S_B_G():
    fde = one_fde(b"", augmentation="zRS", aug_data=bytes([0x1B]))
    assert fde.cie.signal_frame and not fde.cie.pauth_b_key
    fde = one_fde(b"", augmentation="zRB", aug_data=bytes([0x1B]), arch=aarch64.ARCH)
    assert fde.cie.pauth_b_key and not fde.cie.mte_tagged
    fde = one_fde(b"", augmentation="zRG", aug_data=bytes([0x1B]), arch=aarch64.ARCH)
    assert fde.cie.mte_tagged


def test_unknown_augmentation_after_z_is_skipped_by_length():
    # "zRX": R is read, X is unknown; the 3 bytes of X's data are skipped.
    fde = one_fde(bytes([0x41, 0x0E, 16]), augmentation="zRX",
                  aug_data=bytes([0x1B, 0xAA, 0xBB, 0xCC]))
    assert fde.cie.fde_encoding == 0x1B
    assert fde.cie.instructions.startswith(CIE_PROGRAM)
    assert spans(execute(fde, X86)) == [(START, START + 1), (START + 1, START + SIZE)]


def test_augmentation_after_an_unknown_one_is_not_interpreted():
    # libgcc stops at the first unknown character: the 'S' after 'X' is not seen.
    fde = one_fde(b"", augmentation="zRXS", aug_data=bytes([0x1B, 0x00]))
    assert not fde.cie.signal_frame


def test_R_without_z_reads_its_byte_directly():
    b = Builder()
    cie = b.cie(CIE_PROGRAM, augmentation="R", aug_data=bytes([0x03]), fde_encoding=0x03)
    b.fde(cie, START, SIZE)
    f = CfiSection(b.region(), "eh_frame", X86).fdes()[0]
    assert f.cie.fde_encoding == 0x03 and (f.start, f.end) == (START, START + SIZE)


def test_eh_augmentation_skips_its_pointer():
    b = Builder()
    cie = b.cie(CIE_PROGRAM, augmentation="eh", eh_ptr=struct.pack("<Q", 0xDEAD))
    b.fde(cie, START, SIZE)
    f = CfiSection(b.region(), "eh_frame", X86).fdes()[0]
    assert f.cie.augmentation == "eh" and f.cie.fde_encoding == 0
    assert f.cie.instructions.startswith(CIE_PROGRAM) and f.start == START


# --- pointer encodings --------------------------------------------------------------

FORMATS = {"absptr": 0x00, "uleb128": 0x01, "udata2": 0x02, "udata4": 0x03, "udata8": 0x04,
           "sleb128": 0x09, "sdata2": 0x0A, "sdata4": 0x0B, "sdata8": 0x0C}
APPLICATIONS = {"abs": 0x00, "pcrel": 0x10, "textrel": 0x20, "datarel": 0x30}


@pytest.mark.parametrize("application", APPLICATIONS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_fde_start_in_every_encoding(fmt, application):
    encoding = FORMATS[fmt] | APPLICATIONS[application]
    bases = {"text": 0x8000, "data": 0x9000}
    # Keep the stored number small and positive where the format is unsigned
    # or 2 bytes wide: pick the start close above the base it is relative to.
    base = {"abs": 0, "pcrel": 0x10000, "textrel": 0x8000, "datarel": 0x9000}[application]
    start = base + 0x1F0
    if application == "pcrel" and fmt in ("udata2", "udata4", "udata8", "uleb128"):
        start = 0x10000 + 0x7F0             # above the field: a positive distance
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, fde_encoding=encoding)
    b.fde(cie, start, 0x30, bytes([0x44, 0x0E, 16]), bases=bases)
    section = CfiSection(b.region(), "eh_frame", X86, bases=bases)
    f = section.fdes()[0]
    assert (f.start, f.end) == (start, start + 0x30)
    assert spans(execute(f, X86)) == [(start, start + 4), (start + 4, start + 0x30)]


def test_negative_pcrel_fde_start():
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, fde_encoding=0x1B)           # pcrel sdata4: the usual one
    b.fde(cie, 0x400, 0x20)
    assert CfiSection(b.region(), "eh_frame", X86).fdes()[0].start == 0x400


def test_aligned_encoding_pads_to_the_address_size():
    # FDE start: the field is at offset 8 of the FDE, already aligned.
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, fde_encoding=0x50)
    b.fde(cie, 0x5000, 0x10)
    f = CfiSection(b.region(), "eh_frame", X86).fdes()[0]
    assert (f.start, f.end) == (0x5000, 0x5010)
    # A personality pointer at an unaligned place: the CIE's augmentation data
    # starts at 4+4+1+len("zPR\0")+3+1 = 17; the 'P' encoding byte is at 17,
    # the pointer would be at 18 and is aligned up to 24 (6 bytes of padding).
    b = Builder(address=0x10000)
    aug = bytes([0x50]) + b"\0" * 6 + struct.pack("<Q", 0x777) + bytes([0x1B])
    b.cie(CIE_PROGRAM, augmentation="zPR", aug_data=aug)
    c = CfiSection(b.region(), "eh_frame", X86).cie_at(0)
    assert c.personality == 0x777 and c.fde_encoding == 0x1B


def test_funcrel_lsda_and_set_loc():
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, augmentation="zLR", aug_data=bytes([0x43, 0x1B]))   # funcrel udata4
    b.fde(cie, START, SIZE, aug_data=struct.pack("<I", 0x80))
    f = CfiSection(b.region(), "eh_frame", X86).fdes()[0]
    assert f.lsda == START + 0x80


def test_set_loc_uses_the_fde_pointer_encoding_pcrel():
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, fde_encoding=0x1B)
    fde_offset = len(b.data)
    # FDE: length(4) id(4) start(4) range(4) auglen(1) then DW_CFA_set_loc at +17,
    # its operand at +18.
    operand_address = b.address + fde_offset + 18
    program = bytes([0x01]) + encode_pointer(0x1B, START + 0x20, operand_address) + \
        bytes([0x0E, 32])
    b.fde(cie, START, SIZE, program)
    f = CfiSection(b.region(), "eh_frame", X86).fdes()[0]
    rows = execute(f, X86)
    assert spans(rows) == [(START, START + 0x20), (START + 0x20, START + SIZE)]
    assert rows[1].cfa == cfa(RSP, 32)


def test_indirect_fde_start_goes_through_deref():
    b = Builder(address=0x10000)
    cie = b.cie(CIE_PROGRAM, fde_encoding=0x80 | 0x03)      # indirect udata4
    b.fde(cie, 0x7000, 0x10)                                 # 0x7000 is the slot
    memory = {0x7000: struct.pack("<Q", 0x123000)}
    section = CfiSection(b.region(), "eh_frame", X86, deref=lambda a, n: memory[a][:n])
    f = section.fdes()[0]
    assert (f.start, f.end) == (0x123000, 0x123010)
    without_deref = CfiSection(b.region(), "eh_frame", X86)
    assert without_deref.fdes() == []
    [err] = without_deref.bad_entries()
    with pytest.raises(DecodeError) as raised:
        list(without_deref.entries())
    assert raised.value.cause == err.cause
    assert err.section == ".eh_frame" and "indirect" in err.cause


def test_lsda_omitted_encoding_gives_no_lsda():
    fde = one_fde(b"", augmentation="zLR", aug_data=bytes([0xFF, 0x1B]))
    assert fde.lsda is None and fde.cie.lsda_encoding == 0xFF


def test_big_endian_section():
    b = Builder(address=0x10000, order=">")
    cie = b.cie(bytes([0x0C, 15]) + uleb(160), code_align=2, data_align=-8, ra=14,
                fde_encoding=0x1B)
    b.fde(cie, 0x20000, 0x100, bytes([0x03]) + struct.pack(">H", 0x10) + bytes([0x0E]) + uleb(200))
    f = CfiSection(b.region(), "eh_frame", s390x.ARCH).fdes()[0]
    assert f.start == 0x20000
    rows = execute(f, s390x.ARCH)
    assert spans(rows) == [(0x20000, 0x20020), (0x20020, 0x20100)]      # 0x10 * code_align 2
    assert rows[1].cfa == cfa(15, 200)


# --- the CFA program: every instruction ------------------------------------------------

def test_advance_loc_family_with_code_alignment():
    program = bytes([0x41, 0x0E, 16,                         # advance_loc 1*4
                     0x02, 3, 0x0E, 24,                      # advance_loc1 3*4
                     0x03]) + struct.pack("<H", 5) + bytes([0x0E, 32]) + \
        bytes([0x04]) + struct.pack("<I", 7) + bytes([0x0E, 40])
    rows = rows_of(program, code_align=4)
    a = START
    assert spans(rows) == [(a, a + 4), (a + 4, a + 16), (a + 16, a + 36), (a + 36, a + 64),
                           (a + 64, a + SIZE)]
    assert [r.cfa.offset for r in rows] == [8, 16, 24, 32, 40]


def test_mips_advance_loc8():
    rows = rows_of(bytes([0x1D]) + struct.pack("<Q", 0x10) + bytes([0x0E, 16]))
    assert spans(rows) == [(START, START + 0x10), (START + 0x10, START + SIZE)]


def test_advance_by_zero_keeps_one_row():
    rows = rows_of(bytes([0x40, 0x0E, 16, 0x40, 0x0E, 24]))
    assert spans(rows) == [(START, START + SIZE)] and rows[0].cfa == cfa(RSP, 24)


def test_def_cfa_forms():
    rows = rows_of(bytes([0x0C, RBP, 16,                      # def_cfa rbp+16
                          0x41, 0x12, RBX]) + sleb(-3) +       # def_cfa_sf rbx, -3*-8 = 24
                   bytes([0x41, 0x0D, R12,                      # def_cfa_register r12 (keeps 24)
                          0x41, 0x0E, 48,                       # def_cfa_offset 48 (not factored)
                          0x41, 0x13]) + sleb(-4) +             # def_cfa_offset_sf -4*-8 = 32
                   bytes([0x41, 0x0F, 2, 0x77, 0x08]))          # def_cfa_expression breg7 +8
    assert [r.cfa for r in rows] == [
        cfa(RBP, 16), cfa(RBX, 24), cfa(R12, 24), cfa(R12, 48), cfa(R12, 32),
        CfaRule("expression", expression=bytes([0x77, 0x08]))]


def test_register_rule_forms():
    program = (bytes([0x80 | RBP, 2])                                   # offset rbp, 2*-8
               + bytes([0x05, RBX, 3])                                  # offset_extended
               + bytes([0x11, R12]) + sleb(-4)                          # offset_extended_sf
               + bytes([0x14, 13, 5])                                   # val_offset
               + bytes([0x15, 14]) + sleb(2)                            # val_offset_sf
               + bytes([0x09, 15, 3])                                   # register r15 in rbx
               + bytes([0x08, 1])                                       # same_value rdx
               + bytes([0x07, 2])                                       # undefined rcx
               + bytes([0x10, 4, 2, 0x76, 0x10])                        # expression rsi
               + bytes([0x16, 5, 1, 0x30])                              # val_expression rdi
               + bytes([0x2F, 8, 2]))                                   # GNU_negative_offset_ext
    (row,) = rows_of(program)
    assert row.registers == {
        RIP: at(-8), RBP: at(-16), RBX: at(-24), R12: at(32),
        13: Rule(RuleKind.VAL_OFFSET, offset=-40), 14: Rule(RuleKind.VAL_OFFSET, offset=-16),
        15: Rule(RuleKind.REGISTER, register=RBX), 1: Rule(RuleKind.SAME), 2: Rule(RuleKind.UNDEFINED),
        4: Rule(RuleKind.EXPRESSION, expression=bytes([0x76, 0x10])),
        5: Rule(RuleKind.VAL_EXPRESSION, expression=bytes([0x30])),
        8: at(16)}


def test_factored_offsets_use_the_data_alignment():
    (row,) = rows_of(bytes([0x80 | RBP, 3]), cie_program=bytes([0x0C, 4, 4]), data_align=-4)
    assert row.registers[RBP] == at(-12)


def test_restore_and_restore_extended():
    cie_program = CIE_PROGRAM + bytes([0x80 | RBX, 5])       # CIE: rbx at cfa-40
    program = bytes([0x80 | RBX, 2, 0x80 | RBP, 3, 0x80 | RIP, 4,
                     0x41, 0xC0 | RBX,                        # restore rbx -> CIE's rule
                     0x41, 0x06, RBP,                         # restore_extended rbp -> no rule
                     0x41, 0x06, RIP])                        # restore rip -> CIE's rule
    rows = rows_of(program, cie_program)
    assert rows[0].registers == {RIP: at(-32), RBX: at(-16), RBP: at(-24)}
    assert rows[1].registers == {RIP: at(-32), RBX: at(-40), RBP: at(-24)}
    assert rows[2].registers == {RIP: at(-32), RBX: at(-40)}
    assert rows[3].registers == {RIP: at(-8), RBX: at(-40)}


def test_remember_and_restore_state_nest():
    program = bytes([0x41, 0x0E, 16, 0x80 | RBP, 2,
                     0x0A,                                    # remember A (cfa 16, rbp)
                     0x41, 0x0E, 32, 0x80 | RBX, 3,
                     0x0A,                                    # remember B (cfa 32, rbp, rbx)
                     0x41, 0x0D, RBP, 0xC0 | RBP,
                     0x41, 0x0B,                              # restore B
                     0x41, 0x0B,                              # restore A
                     0x41, 0x0E, 8])
    rows = rows_of(program)
    assert [(r.cfa.register, r.cfa.offset) for r in rows] == [
        (RSP, 8), (RSP, 16), (RSP, 32), (RBP, 32), (RSP, 32), (RSP, 16), (RSP, 8)]
    assert rows[3].registers == {RIP: at(-8), RBX: at(-24)}
    assert rows[4].registers == {RIP: at(-8), RBP: at(-16), RBX: at(-24)}
    assert rows[5].registers == {RIP: at(-8), RBP: at(-16)}


def test_remembered_state_does_not_carry_from_cie_to_fde():
    fde = one_fde(bytes([0x0B]), CIE_PROGRAM + bytes([0x0A]))
    with pytest.raises(DecodeError) as err:
        execute(fde, X86)
    assert err.value.offset == fde.instructions_offset
    assert "no remembered state" in err.value.cause


def test_remember_and_restore_inside_the_cie():
    (row,) = rows_of(b"", CIE_PROGRAM + bytes([0x0A, 0x80 | RBP, 2, 0x0B]))
    assert row.registers == {RIP: at(-8)}


def test_nop_and_padding_change_nothing():
    (row,) = rows_of(bytes([0x00, 0x00, 0x80 | RBP, 2, 0x00]))
    assert row.registers == {RIP: at(-8), RBP: at(-16)} and row.cfa == cfa(RSP, 8)


def test_gnu_args_size():
    rows = rows_of(bytes([0x41, 0x2E, 16, 0x41, 0x0A, 0x2E, 0, 0x41, 0x0B]))
    # args_size is not part of the remembered state (as in libgcc).
    assert [r.args_size for r in rows] == [0, 16, 0, 0]


def test_aarch64_negate_ra_state_toggles_and_is_remembered():
    arch = aarch64.ARCH
    cie_program = bytes([0x0C, 31, 0])
    program = bytes([0x41, 0x2D, 0x0E, 16, 0x9E, 1, 0x9D, 2,   # paciasp; stp x29, x30
                     0x41, 0x0A, 0x2D,                         # remember; autiasp
                     0x41, 0x0B,                               # restore: signed again
                     0x41, 0x2C])                              # ..._with_pc toggles too
    rows = rows_of(program, cie_program, arch=arch, code_align=4, ra=30)
    assert [r.ra_signed for r in rows] == [False, True, False, True, False]
    assert rows[1].registers == {30: at(-8), 29: at(-16)}


def test_gnu_window_save_is_harmless_on_x86_64():
    (row,) = rows_of(bytes([0x2D, 0x80 | RBP, 2]))
    assert not row.ra_signed and row.registers == {RIP: at(-8), RBP: at(-16)}


def test_negate_ra_state_with_pc_is_unknown_off_aarch64():
    fde = one_fde(bytes([0x2C]))
    with pytest.raises(DecodeError, match="0x2c"):
        execute(fde, X86)


def test_cfa_defined_by_the_fde_before_its_first_row():
    (row,) = rows_of(bytes([0x0C, RSP, 8, 0x80 | RBP, 2]), cie_program=b"")
    assert row.cfa == cfa(RSP, 8) and row.registers == {RBP: at(-16)}


def test_def_cfa_register_without_a_cfa_starts_at_offset_zero():
    (row,) = rows_of(b"", cie_program=bytes([0x0D, 29]))
    assert row.cfa == cfa(29, 0)


def test_instructions_after_the_fde_end_are_not_interpreted():
    program = bytes([0x04]) + struct.pack("<I", SIZE) + bytes([0x0E, 16, 0x41, 0x0E, 24])
    rows = rows_of(program)
    assert spans(rows) == [(START, START + SIZE)] and rows[0].cfa == cfa(RSP, 8)


# --- row_at ------------------------------------------------------------------------------

def test_row_at_matches_execute_at_every_address():
    program = bytes([0x41, 0x0E, 16, 0x80 | RBP, 2, 0x43, 0x0D, RBP, 0x02, 0x30, 0x0C, RSP, 8])
    fde = one_fde(program)
    rows = execute(fde, X86)
    assert len(rows) == 4
    for row in rows:
        for pc in (row.address, row.end - 1):
            got = row_at(fde, pc, X86)
            assert (got.address, got.end, got.cfa, got.registers) == \
                (row.address, row.end, row.cfa, row.registers)
    assert row_at(fde, START - 1, X86) is None and row_at(fde, START + SIZE, X86) is None


def test_row_at_stops_before_bad_semantics_later_in_the_program():
    # restore_state with an empty stack, in force from START+2 on.
    fde = one_fde(bytes([0x41, 0x0E, 16, 0x41, 0x0B]))
    assert row_at(fde, START, X86).cfa == cfa(RSP, 8)
    assert row_at(fde, START + 1, X86).cfa == cfa(RSP, 16)
    with pytest.raises(DecodeError):
        row_at(fde, START + 2, X86)


def test_rows_are_fresh_objects():
    fde = one_fde(bytes([0x41, 0x0E, 16]))
    first = execute(fde, X86)
    first[0].registers.clear()
    assert execute(fde, X86)[0].registers == {RIP: at(-8)}


# --- find_fde -------------------------------------------------------------------------

def test_find_fde_linear_index():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, 0x3000, 0x100)
    b.fde(cie, 0x1000, 0x100)                  # out of order in the section
    b.fde(cie, 0x2000, 0x0)                    # empty: covers nothing
    b.fde(cie, 0x2000, 0x80)
    b.terminator()
    section = CfiSection(b.region(), "eh_frame", X86)
    starts = lambda pc: getattr(section.find_fde(pc), "start", None)   # noqa: E731
    assert starts(0xFFF) is None                        # below the first
    assert starts(0x1000) == 0x1000 and starts(0x10FF) == 0x1000
    assert starts(0x1100) is None                       # gap
    assert starts(0x2000) == 0x2000 and section.find_fde(0x2000).end == 0x2080
    assert starts(0x30FF) == 0x3000
    assert starts(0x3100) is None and starts(2 ** 64) is None   # above the last


# --- .eh_frame_hdr --------------------------------------------------------------------

def _section_with_fdes(count, address=0x200000):
    b = Builder(address=address)
    cie = b.cie(CIE_PROGRAM)
    offsets = [b.fde(cie, 0x10000 + 0x20 * i, 0x10) for i in range(count)]
    b.terminator()
    return b, [(0x10000 + 0x20 * i, address + off) for i, off in enumerate(offsets)]


def test_eh_frame_hdr_fields_and_lookup():
    b, table = _section_with_fdes(5)
    hdr_address = 0x100000
    data = hdr_bytes(table, hdr_address, b.address)
    hdr = EhFrameHdr(Region.from_bytes(".eh_frame_hdr", hdr_address, data), X86)
    assert (hdr.version, hdr.fde_count, hdr.table_encoding) == (1, 5, 0x3B)
    assert hdr.eh_frame_ptr == b.address and hdr.usable
    assert hdr.lookup(0xFFFF) is None                    # below the first entry
    assert hdr.lookup(0x10000) == table[0][1]
    assert hdr.lookup(0x1001F) == table[0][1]            # in the gap after it: still entry 0
    assert hdr.lookup(0x10040) == table[2][1]
    assert hdr.lookup(0x10080) == table[4][1]
    assert hdr.lookup(0xFFFFFFFF) == table[4][1]         # above the last entry
    section = CfiSection(b.region(), "eh_frame", X86)
    assert section.find_fde(0x10045, hdr).start == 0x10040
    assert section.find_fde(0x10015, hdr) is None        # entry 0 found, pc past its end
    assert section.find_fde(0xFFFF, hdr) is None


@pytest.mark.parametrize("encoding", [0x1B, 0x3B, 0x03, 0x04, 0x0C, 0x00, 0x1C])
def test_eh_frame_hdr_table_encodings(encoding):
    b, table = _section_with_fdes(7)
    data = hdr_bytes(table, 0x100000, b.address, table_encoding=encoding)
    hdr = EhFrameHdr(Region.from_bytes(".eh_frame_hdr", 0x100000, data), X86)
    assert hdr.usable
    for location, fde in table:
        assert hdr.lookup(location + 3) == fde


def test_eh_frame_hdr_without_a_usable_table_falls_back_to_the_index():
    b, table = _section_with_fdes(3)
    section = CfiSection(b.region(), "eh_frame", X86)
    cases = {
        "no search table": hdr_bytes([], 0x100000, b.address, table_encoding=0xFF,
                                     fde_count_enc=0xFF),
        "not fixed-size": hdr_bytes(table, 0x100000, b.address, table_encoding=0x01),
        "does not fit": hdr_bytes(table, 0x100000, b.address)[:-8],
    }
    for why, data in cases.items():
        hdr = EhFrameHdr(Region.from_bytes(".eh_frame_hdr", 0x100000, data), X86)
        assert not hdr.usable and why in hdr.why_unusable
        assert hdr.lookup(0x10000) is None
        assert section.find_fde(0x10025, hdr).start == 0x10020


def test_eh_frame_hdr_lookup_reads_few_entries_not_the_table():
    count = 50000                                    # 400 KB of table, ~98 pages
    table = [(0x400000 + 16 * i, 0x900000 + 24 * i) for i in range(count)]
    data = hdr_bytes(table, 0x100000, 0x900000)
    for pc, expected in ((0x400000 + 16 * 31337 + 5, 0x900000 + 24 * 31337),
                         (0x3FFFFF, None), (0xFFFFFFFF, 0x900000 + 24 * (count - 1))):
        calls = []                                   # fresh Region: an empty page cache
        hdr = EhFrameHdr(counting_region(".eh_frame_hdr", 0x100000, data, calls), X86)
        calls.clear()                                # what the header itself cost
        assert hdr.lookup(pc) == expected
        # ~16 probes of a 16-byte entry each, every one at most one 4 KiB page.
        assert len(calls) <= 18, calls
        assert sum(size for _, size in calls) <= 18 * PAGE < len(data) // 5


# --- describe ---------------------------------------------------------------------------

def test_describe_lists_cie_and_fde_programs():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, START, SIZE, bytes([0x41, 0x0E, 16, 0x86, 2, 0x0A, 0x0D, RBP, 0x0B,
                                   0x09, RBX, R12, 0x10, RBX, 2, 0x76, 0x10, 0x2E, 8,
                                   0xC6, 0x08, RBX, 0x07, RIP, 0x14, RBX, 1]))
    b.terminator()
    section = CfiSection(b.region(), "eh_frame", X86)
    c, f = list(section.entries())
    assert describe(c, X86)[:2] == ["DW_CFA_def_cfa: rsp+8", "DW_CFA_offset: rip at cfa-8"]
    assert describe(f, X86)[:14] == [
        "DW_CFA_advance_loc: 1 to 0x1001",
        "DW_CFA_def_cfa_offset: 16",
        "DW_CFA_offset: rbp at cfa-16",
        "DW_CFA_remember_state",
        "DW_CFA_def_cfa_register: rbp",
        "DW_CFA_restore_state",
        "DW_CFA_register: rbx in r12",
        "DW_CFA_expression: rbx at [expr 7610]",
        "DW_CFA_GNU_args_size: 8",
        "DW_CFA_restore: rbp",
        "DW_CFA_same_value: rbx",
        "DW_CFA_undefined: rip",
        "DW_CFA_val_offset: rbx = cfa-8",
        "DW_CFA_nop",
    ]


def test_describe_names_0x2d_by_arch():
    fde = one_fde(bytes([0x2D]), bytes([0x0C, 31, 0]), arch=aarch64.ARCH, ra=30)
    assert describe(fde, aarch64.ARCH)[0] == "DW_CFA_AARCH64_negate_ra_state"
    assert describe(fde, X86)[0] == "DW_CFA_GNU_window_save"


def test_decoded_cie_is_cached():
    b = Builder()
    cie = b.cie(CIE_PROGRAM)
    b.fde(cie, 0x1000, 0x10)
    b.fde(cie, 0x2000, 0x10)
    f1, f2 = CfiSection(b.region(), "eh_frame", X86).fdes()
    assert f1.cie is f2.cie


def test_uleb_register_numbers_above_63():
    (row,) = rows_of(bytes([0x05]) + uleb(130) + bytes([2]))
    assert row.registers[130] == at(-16)
