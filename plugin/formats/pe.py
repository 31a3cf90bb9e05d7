"""PE/COFF headers: DOS header, PE signature, COFF file header, the PE32+
optional header with its data directories, and the section table.

Reads through a read(address, size) -> bytes callable, so the same code
works on a file (address = file offset, layout="file") and on an image the
loader mapped (address = image base + RVA, layout="image"). Only what the
unwinder needs is decoded: the machine, the image base, the exception
directory (data directory 3, the .pdata RUNTIME_FUNCTION table) and the
sections, by which an RVA is turned into a file offset.

Bad input raises plugin.errors.DecodeError, nothing else: every offset and
count is checked before it is used, and at most _MAX_SECTIONS are read.
(Facts from Microsoft's "PE Format" documentation.)
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from plugin.errors import DecodeError, DecodeKind

Read = Callable[[int, int], bytes]


class Machine(enum.IntEnum):
    I386 = 0x14C
    AMD64 = 0x8664
    ARM64 = 0xAA64


PE32_MAGIC = 0x10B
PE32PLUS_MAGIC = 0x20B
EXPORT_DIRECTORY = 0
EXCEPTION_DIRECTORY = 3
MAX_EXPORT_NAMES = 1 << 16
SCN_MEM_EXECUTE = 0x20000000
_COFF_SIZE = 20
_SECTION_SIZE = 40
_MAX_SECTIONS = 96           # the loader's own limit
_MAX_PE_OFFSET = 0x10000000  # e_lfanew past 256 MiB is garbage
MAX_EXCEPTION_ENTRIES = 1 << 20


@dataclass(frozen=True)
class Section:
    name: str
    virtual_address: int     # RVA
    virtual_size: int
    raw_offset: int          # file offset
    raw_size: int
    characteristics: int = 0

    @property
    def executable(self) -> bool:
        return bool(self.characteristics & SCN_MEM_EXECUTE)


@dataclass(frozen=True)
class PEHeaders:
    machine: Machine
    image_base: int
    size_of_image: int
    exception_rva: int       # 0 when the image has no exception directory
    exception_size: int
    sections: Tuple[Section, ...]
    symbol_table: int = 0    # file offset of the COFF symbol table (lld-link /debug:symtab), 0: none
    symbol_count: int = 0
    export_rva: int = 0      # 0 when the image exports nothing
    export_size: int = 0


def _read(read: Read, address: int, size: int, what: str) -> bytes:
    try:
        data = read(address, size)
    except (OSError, ValueError, IndexError) as exc:
        raise DecodeError("PE", None, "cannot read the %s at 0x%x: %s" % (what, address, exc), DecodeKind.UNREADABLE)
    if data is None or len(data) < size:
        raise DecodeError("PE", None, "the %s at 0x%x is truncated (%d of %d bytes)"
                          % (what, address, 0 if data is None else len(data), size), DecodeKind.TRUNCATED)
    return bytes(data[:size])


def is_pe(head: bytes) -> bool:
    """Whether bytes start with the DOS header's "MZ"."""
    return head[:2] == b"MZ"


def read_headers(read: Read, base: int = 0) -> PEHeaders:
    """The headers of the PE image whose DOS header is at base."""
    dos = _read(read, base, 64, "DOS header")
    if dos[:2] != b"MZ":
        raise DecodeError("PE", None, "no MZ signature (starts with %s)" % dos[:2].hex(), DecodeKind.MALFORMED)
    lfanew = struct.unpack_from("<I", dos, 0x3C)[0]
    if lfanew < 64 or lfanew > _MAX_PE_OFFSET:
        raise DecodeError("PE", None, "e_lfanew 0x%x is outside the file's headers" % lfanew, DecodeKind.MALFORMED)
    head = _read(read, base + lfanew, 4 + _COFF_SIZE, "PE signature and COFF header")
    if head[:4] != b"PE\0\0":
        raise DecodeError("PE", None, "no PE signature at 0x%x (found %s)" % (lfanew, head[:4].hex()),
                          DecodeKind.MALFORMED)
    machine, nsections, _, symtab, nsyms, opt_size, _ = struct.unpack_from("<HHIIIHH", head, 4)
    if machine == Machine.I386:
        raise DecodeError("PE", None, "machine i386 (0x14c) has no .pdata: 32-bit x86 unwinds by "
                          "frame chains and SEH records on the stack, which are not read", DecodeKind.UNSUPPORTED)
    if machine not in (Machine.AMD64, Machine.ARM64):
        raise DecodeError("PE", None, "machine 0x%x is not supported (only AMD64 and ARM64)" % machine,
                          DecodeKind.UNSUPPORTED)
    if nsections > _MAX_SECTIONS:
        raise DecodeError("PE", None, "%d sections (the limit is %d)" % (nsections, _MAX_SECTIONS), DecodeKind.LIMIT)
    opt_at = base + lfanew + 4 + _COFF_SIZE
    if opt_size < 112:
        raise DecodeError("PE", None, "optional header of %d bytes is too small for PE32+" % opt_size,
                          DecodeKind.MALFORMED)
    opt = _read(read, opt_at, opt_size, "optional header")
    magic = struct.unpack_from("<H", opt, 0)[0]
    if magic != PE32PLUS_MAGIC:
        raise DecodeError("PE", None, "optional header magic 0x%x is not PE32+ (0x20b)" % magic, DecodeKind.UNSUPPORTED)
    image_base = struct.unpack_from("<Q", opt, 24)[0]
    size_of_image = struct.unpack_from("<I", opt, 56)[0]
    ndirs = struct.unpack_from("<I", opt, 108)[0]
    exc_rva, exc_size = _directory(opt, opt_size, ndirs, EXCEPTION_DIRECTORY)
    exp_rva, exp_size = _directory(opt, opt_size, ndirs, EXPORT_DIRECTORY)
    table = _read(read, opt_at + opt_size, nsections * _SECTION_SIZE, "section table")
    sections = []
    for n in range(nsections):
        name, vsize, vaddr, rsize, roff = struct.unpack_from("<8sIIII", table, n * _SECTION_SIZE)
        flags = struct.unpack_from("<I", table, n * _SECTION_SIZE + 36)[0]
        sections.append(Section(name.rstrip(b"\0").decode("latin-1"), vaddr, vsize, roff, rsize, flags))
    return PEHeaders(Machine(machine), image_base, size_of_image, exc_rva, exc_size,
                     tuple(sections), symtab, nsyms, exp_rva, exp_size)


def _directory(opt: bytes, opt_size: int, ndirs: int, index: int) -> Tuple[int, int]:
    """(RVA, size) of data directory `index` of a PE32+ optional header, (0, 0) when absent."""
    if ndirs > index and 112 + 8 * (index + 1) <= opt_size:
        return struct.unpack_from("<II", opt, 112 + 8 * index)
    return 0, 0


def exports(read: Read, headers: PEHeaders) -> List[Tuple[int, str]]:
    """(RVA, name) of each function the export directory names (forwarders left out); `read`
    reads by RVA. DecodeError if the directory cannot be read or is out of bounds."""
    if not headers.export_rva or headers.export_size < 40:
        return []
    directory = _read(read, headers.export_rva, 40, "export directory")
    functions, names, eat, name_rvas, ordinals = struct.unpack_from("<IIIII", directory, 20)
    if names > MAX_EXPORT_NAMES or functions > MAX_EXPORT_NAMES:
        raise DecodeError("PE", None, "%d exported names (the limit is %d)" % (names, MAX_EXPORT_NAMES),
                          DecodeKind.LIMIT)
    if not names:
        return []
    addresses = struct.unpack("<%dI" % functions, _read(read, eat, 4 * functions, "export address table"))
    pointers = struct.unpack("<%dI" % names, _read(read, name_rvas, 4 * names, "export name table"))
    indices = struct.unpack("<%dH" % names, _read(read, ordinals, 2 * names, "export ordinal table"))
    found = []
    for pointer, index in zip(pointers, indices):
        if index >= functions:
            continue
        rva = addresses[index]
        if headers.export_rva <= rva < headers.export_rva + headers.export_size:
            continue        # a forwarder ("DLL.name"), not code in this image
        found.append((rva, _export_name(read, pointer)))
    return found


def _export_name(read: Read, rva: int) -> str:
    """A NUL-terminated export name (at most 256 bytes)."""
    raw = _read_some(read, rva, 256)
    return raw.split(b"\0", 1)[0].decode("latin-1")


def _read_some(read: Read, address: int, size: int) -> bytes:
    """Up to size bytes at address: fewer where the readable memory ends (a name near a page end)."""
    for length in (size, 64, 16):
        try:
            data = read(address, length)
        except (OSError, ValueError, IndexError):
            continue
        if data:
            return bytes(data)
    raise DecodeError("PE", None, "cannot read the export name at 0x%x" % address, DecodeKind.UNREADABLE)


_SYMBOL_SIZE = 18
_MAX_SYMBOLS = 1 << 20
_FUNCTION_TYPE = 0x20        # IMAGE_SYM_DTYPE_FUNCTION << 4
_EXTERNAL = 2                # IMAGE_SYM_CLASS_EXTERNAL: a global label (assembly's, with no .def type)


def function_symbols(data: bytes, headers: PEHeaders) -> List[Tuple[int, str]]:
    """(RVA, name) of each function in a file's COFF symbol table (none when it has no table): the
    symbols typed as functions, and the global labels of executable sections (assembly's `f:`).
    DecodeError if the table is not inside the file."""
    if not headers.symbol_table or not headers.symbol_count:
        return []
    count = min(headers.symbol_count, _MAX_SYMBOLS)
    end = headers.symbol_table + count * _SYMBOL_SIZE
    if end + 4 > len(data):
        raise DecodeError("PE", None, "the COFF symbol table at 0x%x runs past the file's end" % headers.symbol_table,
                          DecodeKind.TRUNCATED)
    strings = data[end:]
    out = []
    n = 0
    while n < count:
        raw = data[headers.symbol_table + n * _SYMBOL_SIZE:headers.symbol_table + (n + 1) * _SYMBOL_SIZE]
        name, value, section, kind, storage, aux = struct.unpack("<8sIhHBB", raw)
        if name[:4] == b"\0\0\0\0":
            offset = struct.unpack_from("<I", name, 4)[0]
            name = strings[offset:strings.find(b"\0", offset)] if 4 <= offset < len(strings) else b""
        if 0 < section <= len(headers.sections) and (
                kind == _FUNCTION_TYPE or storage == _EXTERNAL and headers.sections[section - 1].executable):
            out.append((headers.sections[section - 1].virtual_address + value,
                        name.rstrip(b"\0").decode("latin-1")))
        n += 1 + aux
    return out


def section_of(headers: PEHeaders, rva: int) -> Optional[Section]:
    """The section holding an RVA, or None."""
    for s in headers.sections:
        if s.virtual_address <= rva < s.virtual_address + max(s.virtual_size, s.raw_size):
            return s
    return None


def rva_reader(read: Read, headers: PEHeaders, layout: str, base: int = 0) -> Read:
    """A read(rva, size) over the image: layout "image" reads base + rva; layout "file"
    turns the rva into a file offset through the section table (DecodeError outside any)."""
    if layout == "image":
        return lambda rva, size: _read(read, base + rva, size, "data at RVA 0x%x" % rva)

    def from_file(rva: int, size: int) -> bytes:
        s = section_of(headers, rva)
        if s is None:
            raise DecodeError("PE", None, "RVA 0x%x is in no section" % rva, DecodeKind.MALFORMED)
        off = rva - s.virtual_address
        if off + size > s.raw_size:
            raise DecodeError("PE", None, "RVA 0x%x+%d is past the raw data of %s" % (rva, size, s.name),
                              DecodeKind.TRUNCATED)
        return _read(read, s.raw_offset + off, size, "data at RVA 0x%x" % rva)
    return from_file


def exception_entries(read: Read, rva: int, size: int, layout: str) -> List[tuple]:
    """The exception directory's entries unpacked by a struct layout: x64 RUNTIME_FUNCTION
    "<III", ARM64 "<II" (at most MAX_EXCEPTION_ENTRIES; a partial entry at the end is left out)."""
    width = struct.calcsize(layout)
    count = size // width
    if count > MAX_EXCEPTION_ENTRIES:
        raise DecodeError(".pdata", None, "%d entries (the limit is %d)" % (count, MAX_EXCEPTION_ENTRIES),
                          DecodeKind.LIMIT)
    data = read(rva, count * width)
    return [struct.unpack_from(layout, data, n * width) for n in range(count)]


def file_reader(data: bytes) -> Read:
    """read(offset, size) over a file's bytes (short at the end, as a file read is)."""
    def read(offset: int, size: int) -> bytes:
        if offset < 0:
            raise ValueError("negative offset")
        return data[offset:offset + size]
    return read
