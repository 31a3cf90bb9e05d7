"""DWARF call frame information: .eh_frame, .debug_frame and .eh_frame_hdr.

A CFI section is a sequence of entries: CIEs (what many functions share:
alignment factors, the return-address column, pointer encodings, the
initial rules) and FDEs (one address range each, pointing back at a CIE,
with a program of DW_CFA_* instructions). Running the CIE's initial
instructions and then the FDE's gives the rows of the unwind table: for
each address range, how to compute the CFA and how to recover each
register of the caller (plugin/rules.py).

References: DWARF 5 section 6.4 (call frame information), the LSB
"Exception Frames" chapter (.eh_frame, .eh_frame_hdr, augmentations,
DW_EH_PE_* pointer encodings), the AArch64 DWARF supplement
(DW_CFA_AARCH64_negate_ra_state, augmentations 'B' and 'G').

Choices where the sources differ or leave room (each also noted where it
is made):

- .eh_frame with a 64-bit length: the CIE id / CIE pointer stays 4 bytes,
  as the LSB specifies and LLVM reads it (GDB and readelf read 8 bytes).
  .debug_frame DWARF64 uses 8 bytes, as DWARF specifies.
- AArch64 augmentations: 'B' (return address signed with the B key) sets
  CIE.pauth_b_key; 'G' (MTE-tagged stack frames) sets CIE.mte_tagged.
- Personality and LSDA pointers with DW_EH_PE_indirect are followed through
  `deref` when it can read them; otherwise the value is None (and for the
  personality, CIE.personality_slot keeps the pointer's address). Unwinding
  does not need them, so they never make an entry undecodable.
- A zero length ends .eh_frame (the terminator); in .debug_frame it is
  4 bytes of padding and the walk goes on.
- Location advances and DW_CFA_set_loc in a CIE's initial instructions are
  errors: the initial instructions describe one state, not a table.
- DW_CFA_restore inside the CIE program itself removes the rule (there is
  no initial rule yet); in an FDE it restores the CIE's rule or removes it.
- DW_CFA_def_cfa_register with no CFA defined yet gives register+0 (both
  readelf and llvm-dwarfdump do this); with an expression CFA it is an
  error, as are DW_CFA_def_cfa_offset(_sf) with an expression or no CFA
  (DWARF: "valid only if the current CFA rule is defined to use a register
  and offset").
- DW_CFA_remember_state saves the CFA rule, the register rules and the
  aarch64 RA-signing state; the GNU_args_size value is not saved (as in
  libgcc, where it lives outside the remembered register set).
- Rows: a new row starts at each location advance that moves the location;
  an advance by 0 keeps the current row. Instructions after the location
  reaches the FDE's end cannot affect any address in the FDE and are not
  interpreted (they are still decoded, so bad bytes there are errors).
- Also decoded, beyond the usual set: DW_CFA_MIPS_advance_loc8 (0x1d), and on
  aarch64 DW_CFA_AARCH64_negate_ra_state_with_pc (0x2c), which toggles
  Row.ra_signed like 0x2d (the pc diversifier does not matter for stripping).
- Every row has a CFA rule: a row that would start before any
  DW_CFA_def_cfa* is a DecodeError (unwinding cannot use it, and Row users
  rely on `cfa` being a CfaRule).
"""

import bisect
from dataclasses import dataclass, field

from plugin.errors import DecodeError, MemoryReadError
from plugin.memory import (PE_ABSPTR, PE_DATAREL, PE_INDIRECT, PE_OMIT, PE_PCREL,
                      Cursor, encoded_size)
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

# --- DW_CFA opcodes (DWARF 5 table 7.29, GNU and vendor extensions) ---------

CFA_NOP = 0x00
CFA_SET_LOC = 0x01
CFA_ADVANCE_LOC1 = 0x02
CFA_ADVANCE_LOC2 = 0x03
CFA_ADVANCE_LOC4 = 0x04
CFA_OFFSET_EXTENDED = 0x05
CFA_RESTORE_EXTENDED = 0x06
CFA_UNDEFINED = 0x07
CFA_SAME_VALUE = 0x08
CFA_REGISTER = 0x09
CFA_REMEMBER_STATE = 0x0A
CFA_RESTORE_STATE = 0x0B
CFA_DEF_CFA = 0x0C
CFA_DEF_CFA_REGISTER = 0x0D
CFA_DEF_CFA_OFFSET = 0x0E
CFA_DEF_CFA_EXPRESSION = 0x0F
CFA_EXPRESSION = 0x10
CFA_OFFSET_EXTENDED_SF = 0x11
CFA_DEF_CFA_SF = 0x12
CFA_DEF_CFA_OFFSET_SF = 0x13
CFA_VAL_OFFSET = 0x14
CFA_VAL_OFFSET_SF = 0x15
CFA_VAL_EXPRESSION = 0x16
CFA_MIPS_ADVANCE_LOC8 = 0x1D
CFA_AARCH64_NEGATE_RA_STATE_WITH_PC = 0x2C
CFA_GNU_WINDOW_SAVE = 0x2D            # DW_CFA_AARCH64_negate_ra_state on aarch64
CFA_GNU_ARGS_SIZE = 0x2E
CFA_GNU_NEGATIVE_OFFSET_EXTENDED = 0x2F
# The three "primary" opcodes carry an operand in their low 6 bits; the
# decoder reports them under these values.
CFA_ADVANCE_LOC = 0x40
CFA_OFFSET = 0x80
CFA_RESTORE = 0xC0

OPCODE_NAMES = {
    CFA_NOP: "DW_CFA_nop",
    CFA_SET_LOC: "DW_CFA_set_loc",
    CFA_ADVANCE_LOC1: "DW_CFA_advance_loc1",
    CFA_ADVANCE_LOC2: "DW_CFA_advance_loc2",
    CFA_ADVANCE_LOC4: "DW_CFA_advance_loc4",
    CFA_OFFSET_EXTENDED: "DW_CFA_offset_extended",
    CFA_RESTORE_EXTENDED: "DW_CFA_restore_extended",
    CFA_UNDEFINED: "DW_CFA_undefined",
    CFA_SAME_VALUE: "DW_CFA_same_value",
    CFA_REGISTER: "DW_CFA_register",
    CFA_REMEMBER_STATE: "DW_CFA_remember_state",
    CFA_RESTORE_STATE: "DW_CFA_restore_state",
    CFA_DEF_CFA: "DW_CFA_def_cfa",
    CFA_DEF_CFA_REGISTER: "DW_CFA_def_cfa_register",
    CFA_DEF_CFA_OFFSET: "DW_CFA_def_cfa_offset",
    CFA_DEF_CFA_EXPRESSION: "DW_CFA_def_cfa_expression",
    CFA_EXPRESSION: "DW_CFA_expression",
    CFA_OFFSET_EXTENDED_SF: "DW_CFA_offset_extended_sf",
    CFA_DEF_CFA_SF: "DW_CFA_def_cfa_sf",
    CFA_DEF_CFA_OFFSET_SF: "DW_CFA_def_cfa_offset_sf",
    CFA_VAL_OFFSET: "DW_CFA_val_offset",
    CFA_VAL_OFFSET_SF: "DW_CFA_val_offset_sf",
    CFA_VAL_EXPRESSION: "DW_CFA_val_expression",
    CFA_MIPS_ADVANCE_LOC8: "DW_CFA_MIPS_advance_loc8",
    CFA_AARCH64_NEGATE_RA_STATE_WITH_PC: "DW_CFA_AARCH64_negate_ra_state_with_pc",
    CFA_GNU_WINDOW_SAVE: "DW_CFA_GNU_window_save",
    CFA_GNU_ARGS_SIZE: "DW_CFA_GNU_args_size",
    CFA_GNU_NEGATIVE_OFFSET_EXTENDED: "DW_CFA_GNU_negative_offset_extended",
    CFA_ADVANCE_LOC: "DW_CFA_advance_loc",
    CFA_OFFSET: "DW_CFA_offset",
    CFA_RESTORE: "DW_CFA_restore",
}

_ADVANCES = frozenset((CFA_ADVANCE_LOC, CFA_ADVANCE_LOC1, CFA_ADVANCE_LOC2,
                       CFA_ADVANCE_LOC4, CFA_MIPS_ADVANCE_LOC8))
_FIXED_ADVANCE_SIZES = {CFA_ADVANCE_LOC1: 1, CFA_ADVANCE_LOC2: 2,
                        CFA_ADVANCE_LOC4: 4, CFA_MIPS_ADVANCE_LOC8: 8}

# Guards that keep hostile input from costing unbounded time or memory.
_LEB_MAX_BITS = 640          # same limit as memory.Cursor
_MAX_STATE_DEPTH = 1000      # DW_CFA_remember_state nesting (real code: 1 or 2)
_MAX_AUGMENTATION = 255      # length of a CIE augmentation string
# Rows and remembered states copy the register rules; a hostile program with
# thousands of registers and thousands of advances would make that quadratic.
# Real FDEs copy a few hundred rules at most (libc's largest: 287).
_MAX_RULE_COPIES = 1 << 22

_SAME_RULE = Rule(RuleKind.SAME)
_UNDEFINED_RULE = Rule(RuleKind.UNDEFINED)

# Pointer encodings: low nibble = format, 0x70 = how it is applied.
_VALID_FORMATS = frozenset((0x00, 0x01, 0x02, 0x03, 0x04, 0x09, 0x0A, 0x0B, 0x0C))


# --- entries -----------------------------------------------------------------

@dataclass(eq=False)
class CIE:
    """A Common Information Entry. Offsets are offsets in the section."""
    offset: int
    length: int
    is_64: bool
    version: int
    augmentation: str
    address_size: int
    segment_size: int
    code_align: int
    data_align: int
    ra_register: int
    fde_encoding: int = PE_ABSPTR
    lsda_encoding: int = PE_OMIT
    personality: int = None        # routine address; None if absent or not followable
    signal_frame: bool = False     # 'S'
    mte_tagged: bool = False       # 'G' (AArch64 MTE-tagged frames)
    instructions: bytes = b""
    instructions_offset: int = 0
    pauth_b_key: bool = False      # 'B' (AArch64: return address signed with the B key)
    personality_slot: int = None   # where the pointer is stored, for indirect encodings
    has_augmentation_data: bool = False   # 'z'
    section: object = field(default=None, repr=False)
    _program: list = field(default=None, init=False, repr=False)
    _initial: tuple = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class FDE:
    """A Frame Description Entry covering [start, end)."""
    offset: int
    length: int
    is_64: bool
    cie: CIE
    start: int
    end: int
    lsda: int = None
    instructions: bytes = b""
    instructions_offset: int = 0
    section: object = field(default=None, repr=False)
    _program: list = field(default=None, init=False, repr=False)


def _hex(number):
    return "-0x%x" % -number if number < 0 else "0x%x" % number


class _Header:
    """The part every entry shares: length, CIE id / CIE pointer."""
    __slots__ = ("offset", "length", "is_64", "end", "body", "is_cie", "cie_offset")

    def __init__(self, offset, length, is_64, end, body, is_cie, cie_offset):
        self.offset = offset
        self.length = length
        self.is_64 = is_64
        self.end = end              # section offset just past the entry
        self.body = body            # section offset just past the CIE id / pointer
        self.is_cie = is_cie
        self.cie_offset = cie_offset


class CfiSection:
    """One .eh_frame or .debug_frame section, decoded lazily and cached.

    region: plugin.memory.Region of the whole section; kind: "eh_frame" or
    "debug_frame"; arch: plugin.arch.Arch; bases: {"text": .., "data": ..}
    for textrel/datarel pointers; deref(address, size) -> bytes for
    DW_EH_PE_indirect; bias: added to FDE ranges and DW_CFA_set_loc targets
    (a .debug_frame read from the file at link addresses).
    """

    def __init__(self, region, kind, arch, bases=None, deref=None, bias=0):
        if kind not in ("eh_frame", "debug_frame"):
            raise ValueError("kind must be 'eh_frame' or 'debug_frame', not %r" % (kind,))
        self.region = region
        self.kind = kind
        self.arch = arch
        self.bases = dict(bases or {})
        self.deref = deref
        self.bias = bias
        self.name = region.name
        self.is_eh = kind == "eh_frame"
        self._cies = {}
        self._fdes = {}
        self._fde_list = None
        self._index = None

    def error(self, offset, cause):
        return DecodeError(self.name, offset, cause)

    # -- walking the section --

    def entries(self):
        """CIE and FDE objects in section order."""
        offset, size = 0, self.region.size
        while offset < size:
            header = self._header(offset)
            if header.length == 0:
                if self.is_eh:
                    return                      # the zero terminator
                offset = header.end             # .debug_frame: padding
                continue
            if header.is_cie:
                yield self._cie(header)
            else:
                yield self._fde(header)
            offset = header.end

    def cie_at(self, offset):
        cie = self._cies.get(offset)
        if cie is not None:
            return cie
        header = self._header(offset)
        if header.length == 0:
            raise self.error(offset, "expected a CIE, found a zero-length entry")
        if not header.is_cie:
            raise self.error(offset, "expected a CIE, found an FDE")
        return self._cie(header)

    def fde_at(self, offset):
        fde = self._fdes.get(offset)
        if fde is not None:
            return fde
        header = self._header(offset)
        if header.length == 0:
            raise self.error(offset, "expected an FDE, found a zero-length entry")
        if header.is_cie:
            raise self.error(offset, "expected an FDE, found a CIE")
        return self._fde(header)

    def fdes(self):
        if self._fde_list is None:
            self._fde_list = [e for e in self.entries() if isinstance(e, FDE)]
        return self._fde_list

    def find_fde(self, pc, hdr=None):
        """The FDE covering pc, or None.

        With a usable EhFrameHdr, its binary search table finds the entry;
        otherwise a sorted index of all FDEs (built once) is searched.
        """
        if hdr is not None and hdr.usable:
            address = hdr.lookup(pc)
            if address is None:
                return None
            offset = address - self.region.address
            if not 0 <= offset < self.region.size:
                raise DecodeError(hdr.region.name, hdr.table_offset,
                                  "search table points at 0x%x, outside %s" % (address, self.name))
            fde = self.fde_at(offset)
            return fde if fde.start <= pc < fde.end else None
        starts, fdes = self._sorted_index()
        i = bisect.bisect_right(starts, pc) - 1
        if i >= 0 and pc < fdes[i].end:
            return fdes[i]
        return None

    def _sorted_index(self):
        if self._index is None:
            # Empty ranges cover nothing (they are what linkers leave of
            # discarded functions) and would shadow real neighbours.
            live = sorted((f for f in self.fdes() if f.end > f.start), key=lambda f: f.start)
            self._index = ([f.start for f in live], live)
        return self._index

    # -- decoding one entry --

    def _header(self, offset):
        region = self.region
        if offset < 0 or offset + 4 > region.size:
            raise self.error(offset, "entry header runs past the end of the section (size 0x%x)"
                             % region.size)
        c = Cursor(region, offset)
        length = c.u32()
        is_64 = False
        if length == 0xFFFFFFFF:
            length = c.u64()
            is_64 = True
        elif length >= 0xFFFFFFF0:
            raise self.error(offset, "reserved initial length 0x%08x" % length)
        end = c.pos + length
        if end > region.size:
            raise self.error(offset, "entry length 0x%x runs past the end of the section (size 0x%x)"
                             % (length, region.size))
        if length == 0:
            return _Header(offset, 0, is_64, end, end, False, None)
        # LSB: the CIE id / pointer of .eh_frame is 4 bytes even with a 64-bit length.
        id_size = 8 if is_64 and not self.is_eh else 4
        if length < id_size:
            raise self.error(offset, "entry length %d is too short to hold its CIE id" % length)
        id_pos = c.pos
        ident = c.uint(id_size)
        if self.is_eh:
            is_cie = ident == 0
            cie_offset = id_pos - ident         # relative to the pointer field itself
        else:
            is_cie = ident == (1 << (8 * id_size)) - 1
            cie_offset = ident                  # offset from the section start
        return _Header(offset, length, is_64, end, c.pos, is_cie, cie_offset)

    def _check_inside(self, cursor, end, offset, what):
        if cursor.pos > end:
            raise self.error(offset, "%s runs past the end of the entry" % what)

    def _cie(self, h):
        cie = self._cies.get(h.offset)
        if cie is not None:
            return cie
        c = Cursor(self.region, h.body)
        version = c.u8()
        if version not in (1, 3, 4):
            raise self.error(h.body, "unsupported CIE version %d" % version)
        aug_pos = c.pos
        augmentation = c.cstring(limit=_MAX_AUGMENTATION)
        self._check_inside(c, h.end, aug_pos, "augmentation string")
        if augmentation.startswith("eh"):
            # Old g++ "eh" data: one pointer, not part of the augmentation data.
            c.skip(self.arch.address_size)
        if version >= 4:
            address_size, segment_size = c.u8(), c.u8()
            if address_size not in (1, 2, 4, 8):
                raise self.error(c.pos - 2, "unsupported address size %d" % address_size)
            if segment_size not in (0, 1, 2, 4, 8):
                raise self.error(c.pos - 1, "unsupported segment selector size %d" % segment_size)
        else:
            address_size, segment_size = self.arch.address_size, 0
        code_align = c.uleb()
        data_align = c.sleb()
        ra_register = c.u8() if version == 1 else c.uleb()
        self._check_inside(c, h.end, h.body, "CIE header")
        cie = CIE(offset=h.offset, length=h.length, is_64=h.is_64, version=version,
                  augmentation=augmentation, address_size=address_size,
                  segment_size=segment_size, code_align=code_align, data_align=data_align,
                  ra_register=ra_register, section=self)
        self._read_augmentation(c, cie, h, aug_pos)
        self._check_inside(c, h.end, h.offset, "CIE augmentation data")
        cie.instructions_offset = c.pos
        cie.instructions = self.region.read(c.pos, h.end - c.pos)
        self._cies[h.offset] = cie
        return cie

    def _read_augmentation(self, c, cie, h, aug_pos):
        """Apply the augmentation string; leaves c after the augmentation data."""
        chars = cie.augmentation[2:] if cie.augmentation.startswith("eh") else cie.augmentation
        data_end = None
        if chars.startswith("z"):
            cie.has_augmentation_data = True
            length = c.uleb()
            data_end = c.pos + length
            if data_end > h.end:
                raise self.error(c.pos, "augmentation data length %d runs past the end of the entry"
                                 % length)
            chars = chars[1:]
        for char in chars:
            if char == "R":
                cie.fde_encoding = self._encoding(c, "FDE pointer", allow_omit=False)
            elif char == "L":
                cie.lsda_encoding = self._encoding(c, "LSDA pointer", allow_omit=True)
            elif char == "P":
                encoding = self._encoding(c, "personality pointer", allow_omit=True)
                cie.personality, cie.personality_slot = self._pointer(c, encoding, cie.address_size)
            elif char == "S":
                cie.signal_frame = True
            elif char == "B":
                cie.pauth_b_key = True
            elif char == "G":
                cie.mte_tagged = True
            elif data_end is not None:
                # With 'z' the length lets us skip what we do not understand;
                # the rest of the string is not interpreted (as libgcc does).
                break
            else:
                raise self.error(aug_pos, "unknown augmentation %r in %r (no 'z' to skip it)"
                                 % (char, cie.augmentation))
        if data_end is not None:
            if c.pos > data_end:
                raise self.error(aug_pos, "augmentation fields run past the augmentation data")
            c.pos = data_end

    def _encoding(self, c, what, allow_omit):
        at = c.pos
        encoding = c.u8()
        if encoding == PE_OMIT and allow_omit:
            return encoding
        if encoding & 0x0F not in _VALID_FORMATS or encoding & 0x70 > 0x50:
            raise self.error(at, "invalid %s encoding 0x%02x" % (what, encoding))
        return encoding

    def _pointer(self, c, encoding, address_size, func=None):
        """(value, slot) of a personality or LSDA pointer.

        For DW_EH_PE_indirect, slot is where the pointer is stored and value
        is read through deref when that is possible, else None: unwinding does
        not need these pointers, so an unreadable one is not an error.
        """
        if encoding == PE_OMIT:
            return None, None
        bases = self.bases if func is None else dict(self.bases, func=func)
        value = c.encoded(encoding & ~PE_INDIRECT, address_size, bases)
        if not encoding & PE_INDIRECT:
            return value, None
        if self.deref is None:
            return None, value
        try:
            raw = self.deref(value, address_size)
        except (MemoryReadError, DecodeError):
            return None, value
        return int.from_bytes(raw, self.region.byteorder), value

    def _cie_of(self, h):
        """The CIE an FDE points at; a pointer that does not lead to a CIE is
        an error of the FDE, so it names the FDE's offset."""
        target = h.cie_offset
        if not 0 <= target < self.region.size:
            raise self.error(h.offset, "CIE pointer leads to offset %s, outside the section"
                             % _hex(target))
        cie = self._cies.get(target)
        if cie is not None:
            return cie
        try:
            header = self._header(target)
        except DecodeError as exc:
            raise self.error(h.offset, "CIE pointer 0x%x: %s" % (target, exc.cause)) from None
        if header.length == 0:
            raise self.error(h.offset, "CIE pointer 0x%x points at a zero-length entry" % target)
        if not header.is_cie:
            raise self.error(h.offset, "CIE pointer 0x%x points at an FDE, not a CIE" % target)
        return self._cie(header)

    def _fde(self, h):
        fde = self._fdes.get(h.offset)
        if fde is not None:
            return fde
        cie = self._cie_of(h)
        c = Cursor(self.region, h.body)
        if cie.segment_size:
            c.skip(cie.segment_size)            # .debug_frame v4 segment selector
        encoding = cie.fde_encoding
        raw_start = c.encoded(encoding, cie.address_size, self.bases, self.deref)
        address_range = c.encoded(encoding & 0x0F, cie.address_size)
        self._check_inside(c, h.end, h.body, "FDE address range")
        start = raw_start + self.bias
        lsda = None
        if cie.has_augmentation_data:
            length = c.uleb()
            data_end = c.pos + length
            if data_end > h.end:
                raise self.error(c.pos, "augmentation data length %d runs past the end of the entry"
                                 % length)
            lsda, _ = self._pointer(c, cie.lsda_encoding, cie.address_size, func=raw_start)
            if c.pos > data_end:
                raise self.error(h.body, "LSDA pointer runs past the augmentation data")
            c.pos = data_end
        elif cie.lsda_encoding != PE_OMIT:
            lsda, _ = self._pointer(c, cie.lsda_encoding, cie.address_size, func=raw_start)
            self._check_inside(c, h.end, h.body, "LSDA pointer")
        fde = FDE(offset=h.offset, length=h.length, is_64=h.is_64, cie=cie, start=start,
                  end=start + address_range, lsda=lsda, instructions_offset=c.pos,
                  instructions=self.region.read(c.pos, h.end - c.pos), section=self)
        self._fdes[h.offset] = fde
        return fde


# --- .eh_frame_hdr -----------------------------------------------------------

class EhFrameHdr:
    """The .eh_frame_hdr section: a pointer to .eh_frame and a sorted table.

    The table is searched in place, one entry at a time, so a lookup reads
    O(log n) entries, not the whole table. Table pointers are relative to
    the start of this section for datarel (LSB) and to the field for pcrel.
    """

    def __init__(self, region, arch, deref=None):
        self.region = region
        self.arch = arch
        self.deref = deref
        self._bases = {"data": region.address}
        c = region.cursor(0)
        self.version = c.u8()
        if self.version != 1:
            raise DecodeError(region.name, 0, "unsupported .eh_frame_hdr version %d" % self.version)
        self.eh_frame_ptr_enc = c.u8()
        self.fde_count_enc = c.u8()
        self.table_encoding = c.u8()
        size = arch.address_size
        self.eh_frame_ptr = c.encoded(self.eh_frame_ptr_enc, size, self._bases, deref)
        self.fde_count = None
        if self.fde_count_enc != PE_OMIT:
            self.fde_count = c.encoded(self.fde_count_enc, size, self._bases, deref)
        self.table_offset = c.pos
        self._entry_size = encoded_size(self.table_encoding, size)
        self.why_unusable = self._check_table()

    def _check_table(self):
        """None when binary search works, else the reason it does not."""
        encoding = self.table_encoding
        if encoding == PE_OMIT or self.fde_count is None:
            return "no search table"
        if self._entry_size is None:
            return "table encoding 0x%02x is not fixed-size" % encoding
        if encoding & 0x70 not in (0, PE_PCREL, PE_DATAREL):
            return "table encoding 0x%02x needs a base this section does not give" % encoding
        if encoding & PE_INDIRECT and self.deref is None:
            return "table encoding 0x%02x is indirect and memory cannot be read" % encoding
        room = self.region.size - self.table_offset
        if self.fde_count < 0 or self.fde_count * 2 * self._entry_size > room:
            return "table of %d entries does not fit in the section" % self.fde_count
        return None

    @property
    def usable(self):
        return self.why_unusable is None

    def entry(self, index):
        """(initial location, FDE address) of table entry `index`."""
        c = Cursor(self.region, self.table_offset + index * 2 * self._entry_size)
        size = self.arch.address_size
        location = c.encoded(self.table_encoding, size, self._bases, self.deref)
        return location, c.encoded(self.table_encoding, size, self._bases, self.deref)

    def _location(self, index):
        c = Cursor(self.region, self.table_offset + index * 2 * self._entry_size)
        return c.encoded(self.table_encoding, self.arch.address_size, self._bases, self.deref)

    def lookup(self, pc):
        """Address of the FDE with the greatest initial location <= pc, or None.

        None also when the table is unusable (check `usable` first).
        """
        if not self.usable or self.fde_count == 0 or self._location(0) > pc:
            return None
        low, high = 0, self.fde_count - 1        # invariant: location(low) <= pc
        while low < high:
            middle = (low + high + 1) // 2
            if self._location(middle) <= pc:
                low = middle
            else:
                high = middle - 1
        return self.entry(low)[1]


# --- the CFA program ---------------------------------------------------------

class _Malformed(Exception):
    """An operand could not be decoded; becomes a DecodeError at its opcode."""

    def __init__(self, cause):
        super().__init__(cause)
        self.cause = cause


def _uleb(data, i):
    result = shift = 0
    n = len(data)
    while i < n:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7
        if shift > _LEB_MAX_BITS:
            raise _Malformed("LEB128 number is too long")
    raise _Malformed("LEB128 operand runs past the end of the instructions")


def _sleb(data, i):
    start = i
    result, i = _uleb(data, i)
    bits = 7 * (i - start)
    if result >> (bits - 1) & 1:
        result -= 1 << bits
    return result, i


def _block(data, i):
    length, i = _uleb(data, i)
    if i + length > len(data):
        raise _Malformed("expression of %d bytes runs past the end of the instructions" % length)
    return data[i:i + length], i + length


_OFFSET_RULES = {}


def _offset_rule(offset):
    """Rule(RuleKind.OFFSET, offset), shared: Rules are immutable and a few offsets
    (-8, -16, ...) make up nearly all of them."""
    rule = _OFFSET_RULES.get(offset)
    if rule is None:
        rule = Rule(RuleKind.OFFSET, offset=offset)
        if len(_OFFSET_RULES) < 4096:
            _OFFSET_RULES[offset] = rule
    return rule


def _program(owner):
    """The decoded instructions of a CIE or FDE (cached on it).

    A list of (offset in `instructions`, opcode, a, b). Operands come out
    factored and ready to use: advances in bytes, offsets multiplied by the
    data alignment, register rules as Rule objects (built once per entry,
    so executing the same FDE again allocates only the rows).
    """
    if owner._program is None:
        owner._program = _decode(owner)
    return owner._program


def _decode(owner):
    is_fde = isinstance(owner, FDE)
    cie = owner.cie if is_fde else owner
    section = owner.section
    data = owner.instructions
    base = owner.instructions_offset
    caf, daf = cie.code_align, cie.data_align
    order = section.region.byteorder
    out = []
    append = out.append
    i, n = 0, len(data)
    while i < n:
        at = i
        op = data[i]
        i += 1
        kind = op & 0xC0
        try:
            # The most frequent instructions come first, and their one-byte
            # LEB128 operands are read inline (the usual case).
            if kind == CFA_ADVANCE_LOC:
                append((at, CFA_ADVANCE_LOC, (op & 0x3F) * caf, None))
            elif op == CFA_DEF_CFA_OFFSET:
                if i < n and data[i] < 0x80:
                    value = data[i]
                    i += 1
                else:
                    value, i = _uleb(data, i)
                append((at, op, value, None))            # not factored (DWARF 5 6.4.2.2)
            elif op == CFA_NOP:
                append((at, CFA_NOP, None, None))
            elif kind == CFA_OFFSET:
                if i < n and data[i] < 0x80:
                    value = data[i]
                    i += 1
                else:
                    value, i = _uleb(data, i)
                append((at, CFA_OFFSET, op & 0x3F, _offset_rule(value * daf)))
            elif kind == CFA_RESTORE:
                append((at, CFA_RESTORE, op & 0x3F, None))
            elif op in _FIXED_ADVANCE_SIZES:
                size = _FIXED_ADVANCE_SIZES[op]
                if i + size > n:
                    raise _Malformed("operand runs past the end of the instructions")
                delta = int.from_bytes(data[i:i + size], order)
                i += size
                append((at, op, delta * caf, None))
            elif op == CFA_SET_LOC:
                address, i = _set_loc_operand(owner, cie, section, base, i, n)
                append((at, op, address, None))
            elif op == CFA_DEF_CFA:
                register, i = _uleb(data, i)
                value, i = _uleb(data, i)
                append((at, op, register, CfaRule(CfaKind.REGISTER, register=register, offset=value)))
            elif op == CFA_DEF_CFA_SF:
                register, i = _uleb(data, i)
                value, i = _sleb(data, i)
                append((at, op, register, CfaRule(CfaKind.REGISTER, register=register, offset=value * daf)))
            elif op == CFA_DEF_CFA_REGISTER:
                register, i = _uleb(data, i)
                append((at, op, register, None))
            elif op == CFA_DEF_CFA_OFFSET_SF:
                value, i = _sleb(data, i)
                append((at, op, value * daf, None))
            elif op == CFA_DEF_CFA_EXPRESSION:
                block, i = _block(data, i)
                append((at, op, None, CfaRule(CfaKind.EXPRESSION, expression=block)))
            elif op in (CFA_OFFSET_EXTENDED, CFA_VAL_OFFSET, CFA_GNU_NEGATIVE_OFFSET_EXTENDED):
                register, i = _uleb(data, i)
                value, i = _uleb(data, i)
                offset = -value * daf if op == CFA_GNU_NEGATIVE_OFFSET_EXTENDED else value * daf
                kind_name = RuleKind.VAL_OFFSET if op == CFA_VAL_OFFSET else RuleKind.OFFSET
                append((at, op, register, Rule(kind_name, offset=offset)))
            elif op in (CFA_OFFSET_EXTENDED_SF, CFA_VAL_OFFSET_SF):
                register, i = _uleb(data, i)
                value, i = _sleb(data, i)
                kind_name = RuleKind.VAL_OFFSET if op == CFA_VAL_OFFSET_SF else RuleKind.OFFSET
                append((at, op, register, Rule(kind_name, offset=value * daf)))
            elif op in (CFA_EXPRESSION, CFA_VAL_EXPRESSION):
                register, i = _uleb(data, i)
                block, i = _block(data, i)
                kind_name = RuleKind.EXPRESSION if op == CFA_EXPRESSION else RuleKind.VAL_EXPRESSION
                append((at, op, register, Rule(kind_name, expression=block)))
            elif op == CFA_REGISTER:
                register, i = _uleb(data, i)
                source, i = _uleb(data, i)
                append((at, op, register, Rule(RuleKind.REGISTER, register=source)))
            elif op in (CFA_SAME_VALUE, CFA_UNDEFINED):
                register, i = _uleb(data, i)
                append((at, op, register, _SAME_RULE if op == CFA_SAME_VALUE else _UNDEFINED_RULE))
            elif op == CFA_RESTORE_EXTENDED:
                register, i = _uleb(data, i)
                append((at, op, register, None))
            elif op == CFA_GNU_ARGS_SIZE:
                value, i = _uleb(data, i)
                append((at, op, value, None))
            elif op in (CFA_REMEMBER_STATE, CFA_RESTORE_STATE, CFA_GNU_WINDOW_SAVE,
                        CFA_AARCH64_NEGATE_RA_STATE_WITH_PC):
                append((at, op, None, None))
            else:
                raise DecodeError(section.name, base + at, "unknown CFA opcode 0x%02x" % op)
        except _Malformed as exc:
            raise DecodeError(section.name, base + at, "%s: %s"
                              % (OPCODE_NAMES.get(op & 0xC0 or op, "opcode"), exc.cause)) from None
    return out


def _set_loc_operand(owner, cie, section, base, i, n):
    """The target of DW_CFA_set_loc: a pointer in the FDE encoding (eh_frame)."""
    c = Cursor(section.region, base + i)
    func = getattr(owner, "start", None)
    bases = section.bases if func is None else dict(section.bases, func=func - section.bias)
    address = c.encoded(cie.fde_encoding, cie.address_size, bases, section.deref)
    if c.pos > base + n:
        raise _Malformed("operand runs past the end of the instructions")
    return address + section.bias, c.pos - base


def _initial_state(cie, arch):
    """(cfa, rules, args_size, ra_signed) after the CIE's initial instructions."""
    cached = cie._initial
    if cached is not None and cached[0] == arch.name:
        return cached[1]
    state = _run(cie, arch)
    cie._initial = (arch.name, state)
    return state


def _run(owner, arch, stop_pc=None):
    """Interpret the program of `owner`.

    For a CIE: returns the initial state (cfa, rules, args_size, ra_signed).
    For an FDE: returns the list of Rows, or with stop_pc the one Row in
    force at stop_pc (executing only as far as needed).
    """
    is_fde = isinstance(owner, FDE)
    name = owner.section.name
    base = owner.instructions_offset
    if is_fde:
        cfa, initial_rules, args_size, ra_signed = _initial_state(owner.cie, arch)
        rules = dict(initial_rules)
        loc, end = owner.start, owner.end
    else:
        cfa, initial_rules, args_size, ra_signed = None, None, 0, False
        rules = {}
        loc = end = 0
    aarch64 = arch.name == "aarch64"
    stack = []
    rows = []
    copies = 0
    for at, op, a, b in _program(owner):
        if op in _ADVANCES or op == CFA_SET_LOC:
            if not is_fde:
                raise DecodeError(name, base + at, "%s in a CIE's initial instructions"
                                  % OPCODE_NAMES[op])
            if op == CFA_SET_LOC:
                if a < loc:
                    raise DecodeError(name, base + at, "DW_CFA_set_loc to 0x%x moves back from 0x%x"
                                      % (a, loc))
                new = a
            else:
                new = loc + a
            if new == loc:
                continue
            if new >= end:
                break               # nothing after this applies inside the FDE
            if cfa is None:
                raise _no_cfa(name, base + at, loc)
            if stop_pc is not None and new > stop_pc:
                return Row(loc, cfa, rules, new, args_size, ra_signed)
            copies += len(rules)
            if copies > _MAX_RULE_COPIES:
                raise DecodeError(name, base + at, "program too large: over %d rule copies"
                                  % _MAX_RULE_COPIES)
            rows.append(Row(loc, cfa, dict(rules), new, args_size, ra_signed))
            loc = new
        elif op == CFA_DEF_CFA_OFFSET and cfa is not None and cfa.kind == CfaKind.REGISTER:
            cfa = CfaRule(CfaKind.REGISTER, register=cfa.register, offset=a)     # the common case
        elif op == CFA_NOP:
            pass
        elif b.__class__ is Rule:
            rules[a] = b
        elif op == CFA_RESTORE or op == CFA_RESTORE_EXTENDED:
            if initial_rules is not None and a in initial_rules:
                rules[a] = initial_rules[a]
            else:
                rules.pop(a, None)
        elif op == CFA_DEF_CFA_OFFSET or op == CFA_DEF_CFA_OFFSET_SF:
            if cfa is None or cfa.kind != CfaKind.REGISTER:
                raise DecodeError(name, base + at, "%s but the CFA is %s, not register+offset"
                                  % (OPCODE_NAMES[op], "undefined" if cfa is None else "an expression"))
            cfa = CfaRule(CfaKind.REGISTER, register=cfa.register, offset=a)
        elif op == CFA_DEF_CFA or op == CFA_DEF_CFA_SF or op == CFA_DEF_CFA_EXPRESSION:
            cfa = b
        elif op == CFA_DEF_CFA_REGISTER:
            if cfa is not None and cfa.kind != CfaKind.REGISTER:
                raise DecodeError(name, base + at, "DW_CFA_def_cfa_register but the CFA is an expression")
            cfa = CfaRule(CfaKind.REGISTER, register=a, offset=0 if cfa is None else cfa.offset)
        elif op == CFA_REMEMBER_STATE:
            if len(stack) >= _MAX_STATE_DEPTH:
                raise DecodeError(name, base + at, "DW_CFA_remember_state nested deeper than %d"
                                  % _MAX_STATE_DEPTH)
            copies += len(rules)
            if copies > _MAX_RULE_COPIES:
                raise DecodeError(name, base + at, "program too large: over %d rule copies"
                                  % _MAX_RULE_COPIES)
            stack.append((cfa, dict(rules), ra_signed))
        elif op == CFA_RESTORE_STATE:
            if not stack:
                raise DecodeError(name, base + at, "DW_CFA_restore_state with no remembered state")
            cfa, rules, ra_signed = stack.pop()
        elif op == CFA_GNU_ARGS_SIZE:
            args_size = a
        elif op == CFA_GNU_WINDOW_SAVE:
            if aarch64:
                ra_signed = not ra_signed   # DW_CFA_AARCH64_negate_ra_state
            # Elsewhere it is SPARC's register-window save, which says nothing
            # about the registers this plugin unwinds: accepted and ignored.
        elif op == CFA_AARCH64_NEGATE_RA_STATE_WITH_PC:
            if not aarch64:
                raise DecodeError(name, base + at, "unknown CFA opcode 0x%02x on %s" % (op, arch.name))
            ra_signed = not ra_signed
        else:                                       # pragma: no cover - decoder and interpreter agree
            raise DecodeError(name, base + at, "unhandled CFA opcode 0x%02x" % op)
    if not is_fde:
        return cfa, rules, args_size, ra_signed
    if cfa is None:
        raise _no_cfa(name, owner.offset, loc)
    if stop_pc is not None:
        return Row(loc, cfa, rules, end, args_size, ra_signed)
    rows.append(Row(loc, cfa, rules, end, args_size, ra_signed))
    return rows


def _no_cfa(name, offset, loc):
    return DecodeError(name, offset, "the row at 0x%x has no CFA rule (no DW_CFA_def_cfa* before it)"
                       % loc)


def execute(fde, arch):
    """All rows of `fde`: the CIE's initial instructions, then the FDE's.

    Rows are in address order and each has `end` set; the last ends at
    fde.end. A register appears in `registers` only when a rule was given.
    """
    return _run(fde, arch)


def row_at(fde, pc, arch):
    """The row in force at pc, or None when pc is outside [fde.start, fde.end)."""
    if not fde.start <= pc < fde.end:
        return None
    return _run(fde, arch, stop_pc=pc)


# --- listing -----------------------------------------------------------------

def describe(instructions_owner, arch):
    """A CIE's or FDE's program as text, one line per instruction.

    e.g. "DW_CFA_def_cfa: rsp+8", "DW_CFA_offset: rip at cfa-8",
    "DW_CFA_advance_loc: 4 to 0x1134". Expressions are shown as hex bytes.
    """
    owner = instructions_owner
    is_fde = isinstance(owner, FDE)
    loc = owner.start if is_fde else None
    reg = arch.name_of
    lines = []
    for _, op, a, b in _program(owner):
        name = OPCODE_NAMES[op]
        if op == CFA_GNU_WINDOW_SAVE and arch.name == "aarch64":
            name = "DW_CFA_AARCH64_negate_ra_state"
        if op in _ADVANCES:
            if loc is None:
                lines.append("%s: %d" % (name, a))
            else:
                loc += a
                lines.append("%s: %d to 0x%x" % (name, a, loc))
        elif op == CFA_SET_LOC:
            loc = a
            lines.append("%s: 0x%x" % (name, a))
        elif op in (CFA_DEF_CFA, CFA_DEF_CFA_SF):
            lines.append("%s: %s%+d" % (name, reg(b.register), b.offset))
        elif op == CFA_DEF_CFA_EXPRESSION:
            lines.append("%s: expr %s" % (name, b.expression.hex()))
        elif op == CFA_DEF_CFA_REGISTER:
            lines.append("%s: %s" % (name, reg(a)))
        elif op in (CFA_DEF_CFA_OFFSET, CFA_DEF_CFA_OFFSET_SF, CFA_GNU_ARGS_SIZE):
            lines.append("%s: %d" % (name, a))
        elif op in (CFA_RESTORE, CFA_RESTORE_EXTENDED):
            lines.append("%s: %s" % (name, reg(a)))
        elif isinstance(b, Rule):
            lines.append("%s: %s" % (name, _rule_text(reg(a), b, reg)))
        else:
            lines.append(name)
    return lines


def _rule_text(register, rule, reg):
    if rule.kind == RuleKind.OFFSET:
        return "%s at cfa%+d" % (register, rule.offset)
    if rule.kind == RuleKind.VAL_OFFSET:
        return "%s = cfa%+d" % (register, rule.offset)
    if rule.kind == RuleKind.REGISTER:
        return "%s in %s" % (register, reg(rule.register))
    if rule.kind == RuleKind.EXPRESSION:
        return "%s at [expr %s]" % (register, rule.expression.hex())
    if rule.kind == RuleKind.VAL_EXPRESSION:
        return "%s = expr %s" % (register, rule.expression.hex())
    return register                              # same_value, undefined: the name says it
