"""Mach-O headers, load commands, segments and sections.

Reads a Mach-O image through a plugin.memory.Region, so the same code works
on a file's bytes and on an image the loader mapped into the debuggee. Only
what the unwinder needs is decoded: the header, LC_SEGMENT/LC_SEGMENT_64
with their sections (to find __TEXT,__unwind_info, __TEXT,__eh_frame and
__TEXT,__text), LC_UUID, and the vmaddr of __TEXT, from which the slide
follows. Universal ("fat") files are listed by fat_slices() and a slice is
opened with open_slice().

Bad input raises plugin.errors.DecodeError, nothing else: every count and
size in the header and the load commands is checked against the region and
against sizeofcmds before it is used.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from plugin import arch as arches
from plugin.errors import DecodeError, DecodeKind
from plugin.memory import Region

MH_MAGIC = 0xFEEDFACE
MH_MAGIC_64 = 0xFEEDFACF
FAT_MAGIC = 0xCAFEBABE
FAT_MAGIC_64 = 0xCAFEBABF

CPU_ARCH_ABI64 = 0x01000000
CPU_TYPE_X86 = 7
CPU_TYPE_X86_64 = CPU_TYPE_X86 | CPU_ARCH_ABI64
CPU_TYPE_ARM = 12
CPU_TYPE_ARM64 = CPU_TYPE_ARM | CPU_ARCH_ABI64

LC_SEGMENT = 0x1
LC_SEGMENT_64 = 0x19
LC_UUID = 0x1B

MH_OBJECT = 0x1
MH_EXECUTE = 0x2
MH_DYLIB = 0x6
MH_BUNDLE = 0x8
MH_DSYM = 0xA

# cputype -> name understood by plugin.arch.BY_NAME
_ARCH_OF_CPUTYPE = {
    CPU_TYPE_X86: "i386",
    CPU_TYPE_X86_64: "x86_64",
    CPU_TYPE_ARM64: "aarch64",
}

_HEADER_SIZE = {False: 28, True: 32}        # mach_header, mach_header_64
_SEGMENT_SIZE = {False: 56, True: 72}       # segment_command(_64) incl. cmd/cmdsize
_SECTION_SIZE = {False: 68, True: 80}       # section, section_64
# file(1) tells a fat Mach-O from a Java class (same magic, then the class
# version, 45 and up) by this count.
_MAX_FAT_SLICES = 30


def arch_for_cputype(cputype):
    """plugin.arch Arch for a Mach-O cputype, or None if the plugin has none."""
    name = _ARCH_OF_CPUTYPE.get(cputype)
    return arches.BY_NAME[name] if name else None


class Section(NamedTuple):
    segname: str
    sectname: str
    addr: int          # preferred (unslid) address
    size: int
    offset: int        # file offset (0 for zero-fill sections)


@dataclass(frozen=True)
class Segment:
    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    maxprot: int
    initprot: int
    sections: tuple = ()


class FatSlice(NamedTuple):
    cputype: int
    cpusubtype: int
    offset: int
    size: int


def _name(raw):
    return raw.split(b"\0", 1)[0].decode("latin-1")


class _Reader:
    """Fixed-size reads from a Region in the byte order the magic announced."""

    def __init__(self, region, order):
        self.region = region
        self.order = order          # "<" or ">"

    def unpack(self, fmt, offset):
        size = struct.calcsize(fmt)
        return struct.unpack(self.order + fmt, self.region.read(offset, size))


class MachO:
    """One Mach-O image (not a fat file: see fat_slices / open_slice).

    region        covers the image from its mach_header on: the file's bytes
                  (or a slice of a fat file), or the debuggee's memory.
    load_address  where the image's header is loaded, when it is loaded;
                  slide = load_address - text_vmaddr, else 0.
    mapped        True when `region` is the image as the loader mapped it
                  (sections found at their address + slide), False when it is
                  the file (sections found at their file offset).
    """

    def __init__(self, region, load_address=None, mapped=False):
        self.region = region
        self.mapped = mapped
        self.load_address = load_address
        self._read_header()
        self.segments = []
        self.uuid = None
        self._read_load_commands()
        self.sections = [s for seg in self.segments for s in seg.sections]
        self.text_vmaddr = self._preferred_base()
        self.slide = 0 if load_address is None else load_address - self.text_vmaddr

    # -- header and load commands ------------------------------------------------

    def _error(self, offset, cause, kind: DecodeKind):
        return DecodeError(self.region.name, offset, cause, kind)

    def _read_header(self):
        raw = self.region.read(0, 4)
        for order in ("<", ">"):
            magic = struct.unpack(order + "I", raw)[0]
            if magic in (MH_MAGIC, MH_MAGIC_64):
                break
        else:
            raise self._error(0, "not a Mach-O image (magic %s)" % raw.hex(), DecodeKind.MALFORMED)
        self.is_64 = magic == MH_MAGIC_64
        self.byteorder = "little" if order == "<" else "big"
        self._reader = _Reader(self.region, order)
        (_, self.cputype, self.cpusubtype, self.filetype, self.ncmds,
         self.sizeofcmds, self.flags) = self._reader.unpack("7I", 0)
        self.header_size = _HEADER_SIZE[self.is_64]
        if self.header_size + self.sizeofcmds > self.region.size:
            raise self._error(0, "load commands (0x%x bytes) run past the end of the image"
                              % self.sizeofcmds, DecodeKind.TRUNCATED)
        self.arch = arch_for_cputype(self.cputype)

    def _read_load_commands(self):
        offset = self.header_size
        end = self.header_size + self.sizeofcmds
        for index in range(self.ncmds):
            if offset + 8 > end:
                raise self._error(offset, "load command %d starts past sizeofcmds" % index,
                                  DecodeKind.MALFORMED)
            cmd, cmdsize = self._reader.unpack("2I", offset)
            # cmdsize >= 8 also guarantees the loop advances.
            if cmdsize < 8 or offset + cmdsize > end:
                raise self._error(offset, "load command %d has bad size 0x%x" % (index, cmdsize),
                                  DecodeKind.MALFORMED)
            if cmd in (LC_SEGMENT, LC_SEGMENT_64):
                self.segments.append(self._read_segment(offset, cmdsize, cmd == LC_SEGMENT_64))
            elif cmd == LC_UUID:
                if cmdsize < 24:
                    raise self._error(offset, "LC_UUID too short (0x%x)" % cmdsize, DecodeKind.MALFORMED)
                self.uuid = self.region.read(offset + 8, 16)
            offset += cmdsize

    def _read_segment(self, offset, cmdsize, is_64):
        fixed = _SEGMENT_SIZE[is_64]
        if cmdsize < fixed:
            raise self._error(offset, "segment command too short (0x%x)" % cmdsize, DecodeKind.MALFORMED)
        if is_64:
            fields = self._reader.unpack("16s4Q4I", offset + 8)
        else:
            fields = self._reader.unpack("16s4I4I", offset + 8)
        segname, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, nsects, _flags = fields
        sect_size = _SECTION_SIZE[is_64]
        # cmdsize is bounded by sizeofcmds, itself bounded by the region, so
        # this also bounds the loop below.
        if fixed + nsects * sect_size > cmdsize:
            raise self._error(offset, "segment %r claims %d sections that do not fit its command"
                              % (_name(segname), nsects), DecodeKind.MALFORMED)
        sections = tuple(self._read_section(offset + fixed + i * sect_size, is_64)
                         for i in range(nsects))
        return Segment(_name(segname), vmaddr, vmsize, fileoff, filesize, maxprot, initprot,
                       sections)

    def _read_section(self, offset, is_64):
        if is_64:
            sectname, segname, addr, size, fileoff = self._reader.unpack("16s16s2QI", offset)
        else:
            sectname, segname, addr, size, fileoff = self._reader.unpack("16s16s3I", offset)
        return Section(_name(segname), _name(sectname), addr, size, fileoff)

    def _preferred_base(self):
        """vmaddr of __TEXT; for images without one (object files), the
        segment that maps the start of the file."""
        for seg in self.segments:
            if seg.name == "__TEXT":
                return seg.vmaddr
        for seg in self.segments:
            if seg.fileoff == 0 and seg.filesize:
                return seg.vmaddr
        return 0

    # -- lookups -----------------------------------------------------------------

    @property
    def image_base(self):
        """Run-time address of __TEXT: what __unwind_info offsets are relative to."""
        return self.text_vmaddr + self.slide

    def segment(self, name):
        for seg in self.segments:
            if seg.name == name:
                return seg
        return None

    def section(self, segname, sectname):
        for sect in self.sections:
            if sect.segname == segname and sect.sectname == sectname:
                return sect
        return None

    def section_region(self, section, name=None):
        """A Region over one section's bytes, addressed at its run-time address.

        In a file the bytes are at the section's file offset; in a mapped
        image at its address relative to __TEXT (the header is the start of
        __TEXT). Raises DecodeError when the section lies outside the region.
        """
        if self.mapped:
            start = section.addr - self.text_vmaddr
        else:
            start = section.offset
        label = name or "%s,%s" % (section.segname, section.sectname)
        if start < 0 or start + section.size > self.region.size:
            raise self._error(start, "section %s (0x%x bytes) lies outside the image"
                              % (label, section.size), DecodeKind.TRUNCATED)
        return _subregion(self.region, start, section.size, label,
                          address=section.addr + self.slide)

    def read_code(self, address, size):
        """Bytes at run-time `address` inside __TEXT,__text (for STACK_IND).

        Raises DecodeError when the range is not inside __text.
        """
        text = self.section("__TEXT", "__text")
        if text is None:
            raise self._error(0, "no __TEXT,__text section", DecodeKind.ABSENT)
        start = text.addr + self.slide
        if not (start <= address and address + size <= start + text.size):
            raise self._error(0, "address 0x%x is not in __TEXT,__text" % address, DecodeKind.ABSENT)
        region = self.section_region(text)
        return region.read(address - start, size)


def _subregion(parent, start, size, name, address=None):
    """Region over parent[start:start+size], read through the parent's page cache.

    `address` is the address the new Region reports (default: where the bytes
    are in the parent), so a section can be addressed at its run-time address.
    """
    if address is None:
        address = parent.address + start

    def fetch(addr, n):
        return parent.read(start + (addr - address), n)

    return Region(name, address, size, fetch, parent.byteorder)


def fat_slices(region):
    """[FatSlice] of a universal file, or [] if `region` is not one.

    The fat header is big-endian; each slice is checked to lie inside the file.
    """
    if region.size < 8:
        return []
    magic, count = struct.unpack(">2I", region.read(0, 8))
    if magic not in (FAT_MAGIC, FAT_MAGIC_64):
        return []
    # Java class files share 0xCAFEBABE; their "count" is the class version.
    if count > _MAX_FAT_SLICES:
        raise DecodeError(region.name, 4, "fat header claims %d slices" % count, DecodeKind.LIMIT)
    is_64 = magic == FAT_MAGIC_64
    entry_size = 32 if is_64 else 20
    slices = []
    for i in range(count):
        pos = 8 + i * entry_size
        if is_64:
            cputype, cpusubtype, offset, size, _align, _res = struct.unpack(
                ">2I2Q2I", region.read(pos, entry_size))
        else:
            cputype, cpusubtype, offset, size, _align = struct.unpack(
                ">5I", region.read(pos, entry_size))
        if offset + size > region.size:
            raise DecodeError(region.name, pos, "fat slice %d (0x%x+0x%x) runs past the end"
                              % (i, offset, size), DecodeKind.TRUNCATED)
        slices.append(FatSlice(cputype, cpusubtype, offset, size))
    return slices


def open_slice(region, fat_slice, load_address=None):
    """MachO of one slice of a fat file (files only: fat files are never mapped)."""
    sub = _subregion(region, fat_slice.offset, fat_slice.size,
                     "%s[cputype 0x%x]" % (region.name, fat_slice.cputype))
    return MachO(sub, load_address=load_address)


def open_image(region, cputype=None, load_address=None):
    """MachO of a thin file, or of the slice with `cputype` (else the first) of a fat one."""
    slices = fat_slices(region)
    if not slices:
        return MachO(region, load_address=load_address)
    for candidate in slices:
        if cputype is None or candidate.cputype == cputype:
            return open_slice(region, candidate, load_address)
    raise DecodeError(region.name, 0, "no slice with cputype 0x%x" % cputype, DecodeKind.ABSENT)
