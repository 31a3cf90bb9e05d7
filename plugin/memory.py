"""Bounded, cached, typed reads.

A Region is a named window of bytes (a section in memory or in a file) that
refuses to read outside itself; a Cursor walks a Region reading fixed-size
integers, LEB128 numbers and DWARF pointer encodings. Every failure is a
DecodeError naming the region and the offset, so decoders built on these
never raise anything else for bad input.
"""
from __future__ import annotations

import struct

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.leb128 import LebError, LebProblem, read_sleb, read_uleb

PAGE = 4096

# DWARF exception-header pointer encodings (LSB 2.0, "DW_EH_PE_*").
PE_ABSPTR = 0x00
PE_ULEB128 = 0x01
PE_UDATA2 = 0x02
PE_UDATA4 = 0x03
PE_UDATA8 = 0x04
PE_SLEB128 = 0x09
PE_SDATA2 = 0x0A
PE_SDATA4 = 0x0B
PE_SDATA8 = 0x0C
PE_PCREL = 0x10
PE_TEXTREL = 0x20
PE_DATAREL = 0x30
PE_FUNCREL = 0x40
PE_ALIGNED = 0x50
PE_INDIRECT = 0x80
PE_OMIT = 0xFF

_STRUCTS = {order + code: struct.Struct(order + code) for order in "<>" for code in "BbHhIiQq"}
_FIXED_FORMATS = {
    PE_UDATA2: ("H", 2), PE_UDATA4: ("I", 4), PE_UDATA8: ("Q", 8),
    PE_SDATA2: ("h", 2), PE_SDATA4: ("i", 4), PE_SDATA8: ("q", 8),
}


class Region:
    """`size` bytes starting at `address`, fetched through `fetch(address, n)`.

    Reads are served from 4 KiB pages cached for the life of the Region, so a
    decoder walking a section byte by byte costs one target read per page.
    A Region built from bytes (`Region.from_bytes`) never calls out at all.
    """

    def __init__(self, name, address, size, fetch, byteorder="little"):
        self.name = name
        self.address = address
        self.size = max(0, size)
        self.byteorder = byteorder
        self._fetch = fetch
        self._pages = {}
        self._whole = None

    @classmethod
    def from_bytes(cls, name, address, data, byteorder="little"):
        region = cls(name, address, len(data), None, byteorder)
        region._whole = bytes(data)
        return region

    @property
    def end(self):
        return self.address + self.size

    def contains(self, address):
        return self.address <= address < self.end

    def read(self, offset, size):
        """Bytes [offset, offset+size) of the region, or DecodeError."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise DecodeError(self.name, offset, "read of %d bytes runs past the end (size 0x%x)" % (size, self.size),
                              DecodeKind.TRUNCATED)
        if self._whole is not None:
            return self._whole[offset:offset + size]
        first, last = offset // PAGE, (offset + size - 1) // PAGE if size else offset // PAGE
        chunks = [self._page(i) for i in range(first, last + 1)]
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        start = offset - first * PAGE
        return data[start:start + size]

    def prefetch(self):
        """Read the whole region now, in one read, when it can be read whole
        (a dump that will read all of it anyway); otherwise keep reading by pages."""
        if self._whole is None:
            try:
                self.all_bytes()
            except DecodeError:
                pass

    def all_bytes(self):
        """The whole region as one bytes object (one read for in-memory regions)."""
        if self._whole is None:
            self._whole = self._fetch_checked(0, self.size)
        return self._whole

    def _page(self, index):
        page = self._pages.get(index)
        if page is None:
            start = index * PAGE
            page = self._fetch_checked(start, min(PAGE, self.size - start))
            self._pages[index] = page
        return page

    def _fetch_checked(self, offset, size):
        try:
            data = self._fetch(self.address + offset, size)
        except MemoryReadError as exc:
            raise DecodeError(self.name, offset, str(exc), DecodeKind.UNREADABLE) from None
        if len(data) != size:
            raise DecodeError(self.name, offset, "short read (%d of %d bytes)" % (len(data), size),
                              DecodeKind.UNREADABLE)
        return bytes(data)

    def cursor(self, offset=0):
        return Cursor(self, offset)


def _integer(code):
    """A Cursor method reading one integer of struct format `code` and advancing past it."""
    size = struct.calcsize("<" + code)

    def read(self):
        return self._unpack(code, size)
    return read


class Cursor:
    """A read position in a Region; every read advances it and is bounds-checked."""

    __slots__ = ("region", "pos", "_order")

    def __init__(self, region, pos=0):
        self.region = region
        self.pos = pos
        self._order = "<" if region.byteorder == "little" else ">"

    @property
    def address(self):
        """Target address of the current position."""
        return self.region.address + self.pos

    def error(self, cause, offset=None, kind=DecodeKind.MALFORMED):
        return DecodeError(self.region.name, self.pos if offset is None else offset, cause, kind)

    def bytes(self, n):
        data = self.region.read(self.pos, n)
        self.pos += n
        return data

    def skip(self, n):
        if n < 0 or self.pos + n > self.region.size:
            raise self.error("skip of %d bytes runs past the end" % n)
        self.pos += n

    def _unpack(self, fmt, n):
        pos, region = self.pos, self.region
        if region._whole is not None and pos >= 0 and pos + n <= region.size:
            self.pos = pos + n          # the whole region is at hand: no slice, no page
            return _STRUCTS[self._order + fmt].unpack_from(region._whole, pos)[0]
        value = struct.unpack(self._order + fmt, region.read(pos, n))[0]
        self.pos += n
        return value

    # Fixed-size integers (struct format codes), unsigned and signed, in the region's byte order.
    u8, s8 = _integer("B"), _integer("b")
    u16, s16 = _integer("H"), _integer("h")
    u32, s32 = _integer("I"), _integer("i")
    u64, s64 = _integer("Q"), _integer("q")

    def uint(self, size):
        return {1: self.u8, 2: self.u16, 4: self.u32, 8: self.u64}[size]()

    def sint(self, size):
        return {1: self.s8, 2: self.s16, 4: self.s32, 8: self.s64}[size]()

    def uleb(self):
        return self._leb(read_uleb)

    def sleb(self):
        return self._leb(read_sleb)

    def _leb(self, read):
        start, whole = self.pos, self.region._whole
        data = whole if whole is not None and start >= 0 else _RegionBytes(self.region)
        try:
            value, self.pos = read(data, start, self.region.size)
        except LebError as exc:
            raise self.error(exc.cause, start, LEB_KINDS[exc.kind]) from None
        return value

    def cstring(self, limit=4096):
        start = self.pos
        out = bytearray()
        while True:
            if len(out) > limit:
                raise self.error("string longer than %d bytes" % limit, start)
            byte = self.u8()
            if byte == 0:
                return out.decode("latin-1")
            out.append(byte)

    def encoded(self, encoding, address_size, bases=None, deref=None):
        """Read a pointer in DWARF EH encoding `encoding`.

        bases: {"text": int, "data": int, "func": int} for the relative forms;
        pcrel is relative to the address of the field itself. `deref(address,
        size)` reads target memory for DW_EH_PE_indirect. Returns None for
        DW_EH_PE_omit.
        """
        if encoding == PE_OMIT:
            return None
        field_address = self.address
        fmt = encoding & 0x0F
        app = encoding & 0x70
        if app == PE_ALIGNED:
            pad = (-field_address) % address_size
            self.skip(pad)
            field_address += pad
        if fmt == PE_ABSPTR:
            value = self.uint(address_size)
        elif fmt == PE_ULEB128:
            value = self.uleb()
        elif fmt == PE_SLEB128:
            value = self.sleb()
        elif fmt in _FIXED_FORMATS:
            code, n = _FIXED_FORMATS[fmt]
            value = self._unpack(code, n)
        else:
            raise self.error("unknown pointer encoding 0x%02x" % encoding, self.pos)
        if app == PE_PCREL:
            value += field_address
        elif app in (PE_TEXTREL, PE_DATAREL, PE_FUNCREL):
            key = {PE_TEXTREL: "text", PE_DATAREL: "data", PE_FUNCREL: "func"}[app]
            base = (bases or {}).get(key)
            if base is None:
                raise self.error("pointer encoding 0x%02x needs a %s base that is not known" % (encoding, key))
            value += base
        elif app not in (0, PE_ALIGNED):
            raise self.error("unknown pointer application 0x%02x" % app)
        value &= (1 << (8 * address_size)) - 1
        if encoding & PE_INDIRECT:
            if deref is None:
                raise self.error("indirect pointer 0x%x cannot be followed here" % value)
            try:
                raw = deref(value, address_size)
            except MemoryReadError as exc:
                raise self.error("indirect pointer: %s" % exc) from None
            value = int.from_bytes(raw, self.region.byteorder)
        return value


def encoded_size(encoding, address_size):
    """Byte size of a fixed-size pointer encoding, None for LEB128 or unknown."""
    fmt = encoding & 0x0F
    if fmt == PE_ABSPTR:
        return address_size
    if fmt in _FIXED_FORMATS:
        return _FIXED_FORMATS[fmt][1]
    return None


LEB_KINDS = {LebProblem.TRUNCATED: DecodeKind.TRUNCATED, LebProblem.TOO_LONG: DecodeKind.LIMIT}


class _RegionBytes:
    """A Region's bytes by position, read one at a time (a region not read whole)."""

    def __init__(self, region):
        self.region = region

    def __getitem__(self, offset: int) -> int:
        return self.region.read(offset, 1)[0]


class PageCache:
    """Target memory read through whole pages, kept for one debugger command.

    A stack walk reads a few words per frame from the same few pages; through
    this cache that costs one target read per page instead of one per word.
    The adapter clears it at every command: a `memory write` between two
    commands does not change the process's stop id, so a cache keyed by the
    stop id alone would serve stale bytes. A page that cannot be read whole
    (at the end of a mapping) is remembered as such and the read goes to the
    target exactly as asked, so errors are the target's own. At most
    `max_pages` pages are kept (the cache starts over when full).

    Pages smaller than PAGE (a remote target's: a read's round trip costs more
    than its bytes) are read two at a time where the next one lies in the same
    PAGE and is not kept yet: a walk goes on up the stack, into the next page.
    """

    def __init__(self, fetch, page: int = PAGE, max_pages: int = 4096) -> None:
        self._fetch = fetch
        self._size = page
        self._max = max_pages
        self._pages: dict = {}
        self._partial: set = set()

    def clear(self) -> None:
        self._pages.clear()
        self._partial.clear()

    def resize(self, page: int) -> None:
        """Read `page` bytes at a time from now on (what is kept is dropped when that changes)."""
        if page != self._size:
            self.clear()
            self._size = page

    def read(self, address: int, size: int) -> bytes:
        """`size` bytes at `address`, from cached pages where the pages can be read whole."""
        first, last = address // self._size, (address + size - 1) // self._size
        if size <= 0 or last - first > 1:
            return self._fetch(address, size)       # big reads (tables) are cached by their Region
        chunks = []
        for index in range(first, last + 1):
            data = self._pages.get(index)
            if data is None:
                data = self._load(index)
                if data is None:
                    return self._fetch(address, size)
            chunks.append(data)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        start = address - first * self._size
        return data[start:start + size]

    def _load(self, index: int):
        if index in self._partial:
            return None
        size, after = self._size, index + 1
        if PAGE // size > 1 and after % (PAGE // size) and after not in self._pages and after not in self._partial:
            try:
                data = self._fetch(index * size, 2 * size)
            except MemoryReadError:
                data = None
            if data is not None and len(data) == 2 * size:
                self._keep(after, data[size:])
                return self._keep(index, data[:size])
        try:
            data = self._fetch(index * self._size, self._size)
        except MemoryReadError:
            self._partial.add(index)
            return None
        return self._keep(index, data)

    def _keep(self, index: int, data: bytes) -> bytes:
        if len(self._pages) >= self._max:
            self._pages.clear()
        self._pages[index] = data
        return data
