""".eh_frame_hdr: the pointer to .eh_frame and the sorted search table.

Found by PT_GNU_EH_FRAME; the table maps each FDE's initial location to the
FDE's address, in DW_EH_PE_* encodings (LSB "Exception Frames").
"""
from __future__ import annotations

from typing import NamedTuple

from plugin.arch import Arch
from plugin.errors import DecodeError, DecodeKind
from plugin.formats.cfi.entries import Deref
from plugin.memory import PE_DATAREL, PE_INDIRECT, PE_OMIT, PE_PCREL, Cursor, Region, encoded_size


class HdrEntry(NamedTuple):
    """One entry of the search table."""
    location: int           # the FDE's initial location
    fde_address: int


class EhFrameHdr:
    """The .eh_frame_hdr section: a pointer to .eh_frame and a sorted table.

    The table is searched in place, one entry at a time, so a lookup reads
    O(log n) entries, not the whole table. Table pointers are relative to
    the start of this section for datarel (LSB) and to the field for pcrel.
    """

    def __init__(self, region: Region, arch: Arch, deref: Deref | None = None) -> None:
        self.region = region
        self.arch = arch
        self.deref = deref
        self._bases = {"data": region.address}
        c = region.cursor(0)
        self.version = c.u8()
        if self.version != 1:
            raise DecodeError(region.name, 0, "unsupported .eh_frame_hdr version %d" % self.version,
                              DecodeKind.UNSUPPORTED)
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

    def _check_table(self) -> str | None:
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
    def usable(self) -> bool:
        return self.why_unusable is None

    def entry(self, index: int) -> HdrEntry:
        """Table entry `index`."""
        c = Cursor(self.region, self.table_offset + index * 2 * self._entry_size)
        size = self.arch.address_size
        location = c.encoded(self.table_encoding, size, self._bases, self.deref)
        return HdrEntry(location, c.encoded(self.table_encoding, size, self._bases, self.deref))

    def _location(self, index):
        c = Cursor(self.region, self.table_offset + index * 2 * self._entry_size)
        return c.encoded(self.table_encoding, self.arch.address_size, self._bases, self.deref)

    def lookup(self, pc: int) -> int | None:
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
        return self.entry(low).fde_address
