"""CFI entries: CIEs and FDEs, decoded one at a time from their section.

Each entry starts with a length (32-bit, or 0xffffffff and a 64-bit one) and
a CIE id (in a CIE) or CIE pointer (in an FDE). A CIE carries the
augmentation string ('z', 'R', 'L', 'P', 'S', and AArch64's 'B' and 'G')
and its data; an FDE carries its address range, the LSDA when the CIE's
augmentation says so, and its instructions (decoded by
plugin/formats/cfi/instructions.py). The choices this file makes are listed
in the package docstring (plugin/formats/cfi/__init__.py).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from plugin.arch import Arch
from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.memory import PE_ABSPTR, PE_INDIRECT, PE_OMIT, Cursor, Region

_MAX_AUGMENTATION = 255      # length of a CIE augmentation string
_PCREL_SDATA4 = 0x1B         # DW_EH_PE_pcrel | DW_EH_PE_sdata4: nearly every FDE of .eh_frame
_LE_S32_S32 = struct.Struct("<ii")     # both sdata4, as Cursor.encoded reads them
_BE_S32_S32 = struct.Struct(">ii")

# Pointer encodings: low nibble = format, 0x70 = how it is applied.
_VALID_FORMATS = frozenset((0x00, 0x01, 0x02, 0x03, 0x04, 0x09, 0x0A, 0x0B, 0x0C))

# deref(address, size) -> bytes: reads the debuggee for DW_EH_PE_indirect pointers.
Deref = Callable[[int, int], bytes]


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
    personality: int | None = None        # routine address; None if absent or not followable
    signal_frame: bool = False     # 'S'
    mte_tagged: bool = False       # 'G' (AArch64 MTE-tagged frames)
    instructions: bytes = b""
    instructions_offset: int = 0
    pauth_b_key: bool = False      # 'B' (AArch64: return address signed with the B key)
    personality_slot: int | None = None   # where the pointer is stored, for indirect encodings
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
    lsda: int | None = None
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



class EntryDecoder:
    """Decodes the entries of one .eh_frame or .debug_frame section, by offset,
    and caches them (CfiSection adds the walk over the whole section).

    region: plugin.memory.Region of the whole section; kind: "eh_frame" or
    "debug_frame"; arch: plugin.arch.Arch; bases: {"text": .., "data": ..}
    for textrel/datarel pointers; deref(address, size) -> bytes for
    DW_EH_PE_indirect; bias: added to FDE ranges and DW_CFA_set_loc targets
    (a .debug_frame read from the file at link addresses).
    """

    def __init__(self, region: Region, kind: str, arch: Arch, bases: dict | None = None,
                 deref: Deref | None = None, bias: int = 0) -> None:
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

    def error(self, offset: int, cause: str, kind: DecodeKind = DecodeKind.MALFORMED) -> DecodeError:
        return DecodeError(self.name, offset, cause, kind)

    def cie_at(self, offset: int) -> CIE:
        cie = self._cies.get(offset)
        if cie is not None:
            return cie
        header = self._header(offset)
        if header.length == 0:
            raise self.error(offset, "expected a CIE, found a zero-length entry")
        if not header.is_cie:
            raise self.error(offset, "expected a CIE, found an FDE")
        return self._cie(header)

    def fde_at(self, offset: int) -> FDE:
        fde = self._fdes.get(offset)
        if fde is not None:
            return fde
        header = self._header(offset)
        if header.length == 0:
            raise self.error(offset, "expected an FDE, found a zero-length entry")
        if header.is_cie:
            raise self.error(offset, "expected an FDE, found a CIE")
        return self._fde(header)

    # -- decoding one entry --

    def _header(self, offset):
        region = self.region
        if offset < 0 or offset + 4 > region.size:
            raise self.error(offset, "entry header runs past the end of the section (size 0x%x)"
                             % region.size, DecodeKind.TRUNCATED)
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
                             % (length, region.size), DecodeKind.TRUNCATED)
        if length == 0:
            return _Header(offset, 0, is_64, end, end, False, None)
        # LSB: the CIE id / pointer of .eh_frame is 4 bytes even with a 64-bit length.
        id_size = 8 if is_64 and not self.is_eh else 4
        if length < id_size:
            raise self.error(offset, "entry length %d is too short to hold its CIE id" % length, DecodeKind.TRUNCATED)
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
            raise self.error(offset, "%s runs past the end of the entry" % what, DecodeKind.TRUNCATED)

    def _cie(self, h):
        cie = self._cies.get(h.offset)
        if cie is not None:
            return cie
        c = Cursor(self.region, h.body)
        version = c.u8()
        if version not in (1, 3, 4):
            raise self.error(h.body, "unsupported CIE version %d" % version, DecodeKind.UNSUPPORTED)
        aug_pos = c.pos
        augmentation = c.cstring(limit=_MAX_AUGMENTATION)
        self._check_inside(c, h.end, aug_pos, "augmentation string")
        if augmentation.startswith("eh"):
            # Old g++ "eh" data: one pointer, not part of the augmentation data.
            c.skip(self.arch.address_size)
        if version >= 4:
            address_size, segment_size = c.u8(), c.u8()
            if address_size not in (1, 2, 4, 8):
                raise self.error(c.pos - 2, "unsupported address size %d" % address_size, DecodeKind.UNSUPPORTED)
            if segment_size not in (0, 1, 2, 4, 8):
                raise self.error(c.pos - 1, "unsupported segment selector size %d" % segment_size,
                                 DecodeKind.UNSUPPORTED)
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
                                 % length, DecodeKind.TRUNCATED)
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
                                 % (char, cie.augmentation), DecodeKind.UNSUPPORTED)
        if data_end is not None:
            if c.pos > data_end:
                raise self.error(aug_pos, "augmentation fields run past the augmentation data", DecodeKind.TRUNCATED)
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

    def _fde(self, h, keep=True):
        fde = self._fdes.get(h.offset)
        if fde is not None:
            return fde
        cie = self._cie_of(h)
        fde = self._common_fde(h, cie)
        if fde is not None:
            if keep:
                self._fdes[h.offset] = fde
            return fde
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
                                 % length, DecodeKind.TRUNCATED)
            lsda, _ = self._pointer(c, cie.lsda_encoding, cie.address_size, func=raw_start)
            if c.pos > data_end:
                raise self.error(h.body, "LSDA pointer runs past the augmentation data", DecodeKind.TRUNCATED)
            c.pos = data_end
        elif cie.lsda_encoding != PE_OMIT:
            lsda, _ = self._pointer(c, cie.lsda_encoding, cie.address_size, func=raw_start)
            self._check_inside(c, h.end, h.body, "LSDA pointer")
        fde = FDE(offset=h.offset, length=h.length, is_64=h.is_64, cie=cie, start=start,
                  end=start + address_range, lsda=lsda, instructions_offset=c.pos,
                  instructions=self.region.read(c.pos, h.end - c.pos), section=self)
        if keep:
            self._fdes[h.offset] = fde
        return fde

    def _common_fde(self, h, cie):
        """The FDE at h read straight from the section's bytes in the usual case
        (pc-relative sdata4 range, 'z' augmentation with no LSDA, one-byte data
        length, all inside the entry), or None: then _fde reads it field by
        field, with every check. The same values either way, faster."""
        whole = self.region._whole
        if (cie.fde_encoding != _PCREL_SDATA4 or whole is None or cie.segment_size
                or not cie.has_augmentation_data or cie.lsda_encoding != PE_OMIT):
            return None
        body = h.body
        if body + 9 > h.end or whole[body + 8] >= 0x80:
            return None
        data_end = body + 9 + whole[body + 8]
        if data_end > h.end:
            return None
        pc_offset, address_range = (_LE_S32_S32 if self.region.byteorder == "little"
                                    else _BE_S32_S32).unpack_from(whole, body)
        mask = (1 << (8 * cie.address_size)) - 1
        start = ((self.region.address + body + pc_offset) & mask) + self.bias
        return FDE(offset=h.offset, length=h.length, is_64=h.is_64, cie=cie, start=start,
                   end=start + (address_range & mask), lsda=None, instructions_offset=data_end,
                   instructions=whole[data_end:h.end], section=self)
