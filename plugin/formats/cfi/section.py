"""A whole CFI section: its entries in order and a sorted index of its FDEs.

CfiSection is what the rest of the plugin holds for an .eh_frame or
.debug_frame: EntryDecoder (entries.py) decodes one entry at an offset;
this adds the walk over the section (a zero length ends .eh_frame and is
padding in .debug_frame) and find_fde, which uses an .eh_frame_hdr search
table when there is a usable one and otherwise a sorted index of all FDEs,
built once.
"""
from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator

from plugin.arch import Arch
from plugin.errors import DecodeError, DecodeKind
from plugin.formats.cfi.entries import CIE, FDE, Deref, EntryDecoder
from plugin.formats.cfi.header import EhFrameHdr
from plugin.memory import Region


class CfiSection(EntryDecoder):
    """One .eh_frame or .debug_frame section, decoded lazily and cached: the
    EntryDecoder (whose docstring lists the arguments) plus the walk over the
    whole section, find_fde and the sorted index."""

    def __init__(self, region: Region, kind: str, arch: Arch, bases: dict | None = None,
                 deref: Deref | None = None, bias: int = 0) -> None:
        super().__init__(region, kind, arch, bases, deref, bias)
        self._fde_list = None
        self._bad = []
        self._index = None

    # -- walking the section --

    def walk(self, keep: bool = True) -> Iterator[CIE | FDE | DecodeError]:
        """Entries in section order, each bad one as its DecodeError: an entry
        whose length is sound costs only itself and the walk goes on after it;
        a length that cannot be believed ends the walk (nothing after it can be
        found), yielded as the last item. keep=False: FDEs are not cached (a
        dump of a whole section holds one at a time, and reads it whole)."""
        if not keep:
            self.region.prefetch()
        offset, size = 0, self.region.size
        while offset < size:
            try:
                header = self._header(offset)
            except DecodeError as exc:
                yield exc
                return
            if header.length == 0:
                if self.is_eh:
                    return                      # the zero terminator
                offset = header.end             # .debug_frame: padding
                continue
            try:
                yield self._cie(header) if header.is_cie else self._fde(header, keep)
            except DecodeError as exc:
                yield exc
            offset = header.end

    def entries(self) -> Iterator[CIE | FDE]:
        """CIE and FDE objects in section order; the first bad entry raises its DecodeError."""
        for entry in self.walk():
            if isinstance(entry, DecodeError):
                raise entry
            yield entry

    def fdes(self) -> list[FDE]:
        """Every FDE that decodes; the entries that do not are in bad_entries()."""
        if self._fde_list is None:
            fdes, bad = [], []
            for entry in self.walk():
                if isinstance(entry, FDE):
                    fdes.append(entry)
                elif isinstance(entry, DecodeError):
                    bad.append(entry)
            self._fde_list, self._bad = fdes, bad
        return self._fde_list

    def count_fdes(self) -> int:
        """How many FDEs the walk will meet, from the entry headers alone."""
        self.region.prefetch()
        try:
            data = self.region.all_bytes()
        except DecodeError:
            data = None
        if data is not None:
            return _count_fdes_in(data, self.is_eh, "<" if self.region.byteorder == "little" else ">")
        count, offset, size = 0, 0, self.region.size
        while offset < size:
            try:
                header = self._header(offset)
            except DecodeError:
                break
            if header.length == 0 and self.is_eh:
                break
            count += header.length != 0 and not header.is_cie
            offset = header.end
        return count

    def bad_entries(self) -> list[DecodeError]:
        """Why each entry fdes() left out could not be decoded, in section order."""
        self.fdes()
        return list(self._bad)

    def find_fde(self, pc: int, hdr: EhFrameHdr | None = None) -> FDE | None:
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
                                  "search table points at 0x%x, outside %s" % (address, self.name),
                                  DecodeKind.MALFORMED)
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


def _count_fdes_in(data: bytes, is_eh: bool, order: str) -> int:
    """count_fdes over the section's bytes at hand: the same header rules as
    EntryDecoder._header (a header it refuses ends the count), without
    building a Cursor and a header per entry."""
    u32, u64 = struct.Struct(order + "I").unpack_from, struct.Struct(order + "Q").unpack_from
    count, offset, size = 0, 0, len(data)
    while offset + 4 <= size:
        length, = u32(data, offset)
        pos, is_64 = offset + 4, False
        if length == 0xFFFFFFFF:
            if pos + 8 > size:
                break
            length, = u64(data, pos)
            pos, is_64 = pos + 8, True
        elif length >= 0xFFFFFFF0:
            break
        end = pos + length
        if end > size:
            break
        if length == 0:
            if is_eh:
                break
            offset = end
            continue
        id_size = 8 if is_64 and not is_eh else 4
        if length < id_size:
            break
        ident, = (u64 if id_size == 8 else u32)(data, pos)
        count += ident != 0 if is_eh else ident != (1 << (8 * id_size)) - 1
        offset = end
    return count
