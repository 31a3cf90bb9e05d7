"""Find a Mach-O module's unwind tables by reading its load commands from memory.

dyld maps an image's __TEXT segment from file offset 0, so the mach_header
and the load commands right after it are in memory at the address the
debugger reports for the image. From them:

  * the slide: header address - __TEXT vmaddr (every address in the load
    commands and in __unwind_info is a link-time one plus the slide);
  * the mapped ranges: every LC_SEGMENT(_64) with some access, executable
    when its initprot has VM_PROT_EXECUTE (__PAGEZERO maps nothing);
  * the tables: __TEXT,__unwind_info and __TEXT,__eh_frame, by their
    section headers ("LC_SEGMENT_64 __TEXT");
  * the UUID from LC_UUID, printed the way Apple's tools do.

The header is decoded by plugin.formats.macho over a Region that reads the
target, so a short or damaged header is a DecodeError like any other table.
Images are never universal ("fat") in memory; fat files are a FileTarget
matter (plugin/file_targets/macho.py).
"""
from __future__ import annotations

import struct

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import macho as mf
from plugin.memory import Region
from plugin.modules.module import Module, ModuleFormat, Segment, TableLocation
from plugin.target import ModuleRef, Target

VM_PROT_EXECUTE = 4
# The first four bytes of a thin Mach-O image in either byte order.
MACHO_MAGICS = frozenset(struct.pack(order + "I", magic)
                         for order in "<>" for magic in (mf.MH_MAGIC, mf.MH_MAGIC_64))
# sizeofcmds is read before anything is checked; real images stay far below
# this, and it keeps a corrupt header from asking the debugger for gigabytes.
MAX_LOAD_COMMANDS_SIZE = 1 << 20
UNWIND_SECTIONS = ("__unwind_info", "__eh_frame")


def is_macho_magic(head: bytes) -> bool:
    return bytes(head[:4]) in MACHO_MAGICS


def format_uuid(raw: bytes) -> str:
    """LC_UUID bytes as Apple prints them: 8-4-4-4-12 upper-case hex."""
    text = raw.hex().upper()
    return "-".join((text[:8], text[8:12], text[12:16], text[16:20], text[20:]))


def read_header(target: Target, address: int) -> mf.MachO:
    """MachO decoded from the header and load commands at `address` in the target."""
    head = target.read_memory(address, 28)
    if not is_macho_magic(head):
        raise DecodeError("Mach-O header", 0, "no Mach-O magic at 0x%x" % address, DecodeKind.MALFORMED)
    order = "<" if head[:4] in (struct.pack("<I", mf.MH_MAGIC), struct.pack("<I", mf.MH_MAGIC_64)) else ">"
    is_64 = struct.unpack(order + "I", head[:4])[0] == mf.MH_MAGIC_64
    sizeofcmds = struct.unpack_from(order + "I", head, 20)[0]
    if sizeofcmds > MAX_LOAD_COMMANDS_SIZE:
        raise DecodeError("Mach-O header", 20, "implausible sizeofcmds 0x%x" % sizeofcmds, DecodeKind.LIMIT)
    size = (32 if is_64 else 28) + sizeofcmds
    region = Region("Mach-O image at 0x%x" % address, address, size, target.read_memory,
                    "little" if order == "<" else "big")
    return mf.MachO(region, load_address=address, mapped=True)


def module_from_macho(image: mf.MachO, name: str, path: str | None, header_address: int) -> Module:
    """Module for a decoded MachO whose __TEXT starts at header_address + 0."""
    if image.arch is None:
        raise DecodeError("Mach-O header", 4, "unsupported cputype 0x%x" % image.cputype, DecodeKind.UNSUPPORTED)
    slide = image.slide
    module = Module(name=name, path=path, header_address=header_address, arch=image.arch,
                    format=ModuleFormat.MACHO, load_bias=slide)
    if image.uuid is not None:
        module.uuid = format_uuid(image.uuid)
    for seg in image.segments:
        # __PAGEZERO (no access) only reserves address space: nothing is mapped.
        if seg.vmsize == 0 or seg.initprot == 0:
            continue
        start = seg.vmaddr + slide
        module.segments.append(Segment(start, start + seg.vmsize, bool(seg.initprot & VM_PROT_EXECUTE),
                                       seg.fileoff))
    module.segments.sort(key=lambda s: s.start)
    command = "LC_SEGMENT_64" if image.is_64 else "LC_SEGMENT"
    for section in UNWIND_SECTIONS:
        found = image.section("__TEXT", section)
        if found is not None and found.size:
            module.tables[section] = TableLocation(section, found.addr + slide, found.size,
                                                   "%s __TEXT" % command)
    if not module.tables:
        module.problems.append("no __TEXT,__unwind_info or __TEXT,__eh_frame section")
    return module


def discover_macho(target: Target, ref: ModuleRef) -> Module:
    """Module for the Mach-O image whose header is at ref.header_address."""
    image = read_header(target, ref.header_address)
    return module_from_macho(image, ref.name, ref.path, ref.header_address)
