"""A Target made of a Mach-O file laid out in memory as dyld would map it.

Each segment's file bytes are placed at vmaddr + slide and zero-filled up
to vmsize (__PAGEZERO, which maps nothing, is left out), so module
discovery (plugin/modules/macho.py, from the header in "memory"), the
__unwind_info lookups and STACK_IND's reads of code all go through the
same memory path as in a live debugger. The default slide is 0: addresses
are the file's link-time addresses, which is what `--address` takes.

Universal ("fat") files hold one image per architecture. The slice is
chosen by `arch` ("x86_64", "arm64"/"aarch64", "i386") when given, else the
first slice in the fat header is used (the CLI's `--arch` option).

Object files (MH_OBJECT) map no header: like the ELF FileTarget for
relocatable objects, they list no modules and section_module() builds one
from the load commands read from the file.

Function names come from LC_SYMTAB (symbols are not needed to unwind, and
the table lives in __LINKEDIT, which a debugger has its own way to read).
"""
from __future__ import annotations

import os
import struct

from plugin.errors import DecodeError, DecodeKind
from plugin.file_targets.elf import LaidOutFile
from plugin.formats import macho as mf
from plugin.modules.macho import module_from_macho
from plugin.modules.module import Module
from plugin.memory import Region

LC_SYMTAB = 0x2
N_STAB = 0xE0
N_TYPE = 0x0E
N_SECT = 0x0E

# --arch names -> cputype
CPUTYPES = {"x86_64": mf.CPU_TYPE_X86_64, "arm64": mf.CPU_TYPE_ARM64, "aarch64": mf.CPU_TYPE_ARM64,
            "i386": mf.CPU_TYPE_X86}


def cputype_name(cputype: int) -> str:
    """A cputype as --arch spells it (arm64, x86_64, i386), else its number."""
    for name, value in CPUTYPES.items():
        if value == cputype and name != "aarch64":
            return name
    return "cputype 0x%x" % cputype


def cputype_of(name: str) -> int:
    try:
        return CPUTYPES[name.lower()]
    except KeyError:
        raise ValueError("unknown architecture %r; choose from: %s"
                         % (name, ", ".join(sorted(CPUTYPES)))) from None


class MachOFileTarget(LaidOutFile):
    """A thin Mach-O file, or one slice of a universal one, mapped at base
    (the run-time address of __TEXT; None: the file's own vmaddr)."""

    def __init__(self, path: str, base: int | None = None, arch: str | None = None) -> None:
        self.path = path
        with open(path, "rb") as handle:
            data = handle.read()
        region = Region.from_bytes(os.path.basename(path), 0, data)
        slices = mf.fat_slices(region)
        wanted = cputype_of(arch) if arch else None
        if slices:
            chosen = slices[0] if wanted is None else next(
                (s for s in slices if s.cputype == wanted), None)
            if chosen is None:
                raise ValueError("%s has no %s slice (it has %s)" % (
                    os.path.basename(path), arch, ", ".join(cputype_name(s.cputype) for s in slices)))
            self.image = mf.open_slice(region, chosen)
        else:
            self.image = mf.MachO(region)
            if wanted is not None and self.image.cputype != wanted:
                raise ValueError("%s is a thin %s file, not %s: --arch picks a slice of a universal file"
                                 % (os.path.basename(path), cputype_name(self.image.cputype), arch))
        if self.image.filetype == mf.MH_OBJECT and self.image.byteorder == "little":
            from plugin.file_targets.macho_relocs import relocate_eh_frame
            patched, unapplied = relocate_eh_frame(self.image.region.read(0, self.image.region.size))
            self.problems.extend(unapplied)
            self.image = mf.MachO(Region.from_bytes(os.path.basename(path), 0, patched))
        image = self.image
        self.name = os.path.basename(path)
        self.arch = image.arch
        if self.arch is None:
            raise ValueError("unsupported Mach-O cputype 0x%x" % image.cputype)
        self.slide = 0 if base is None else base - image.text_vmaddr
        pieces = []                  # (start, end, file offset in the image, filesize, executable)
        for seg in image.segments:
            if seg.vmsize == 0 or seg.initprot == 0:
                continue
            if seg.fileoff + seg.filesize > image.region.size:
                raise DecodeError(image.region.name, seg.fileoff,
                                  "segment %s (0x%x bytes at file offset 0x%x) runs past the end "
                                  "of the file (0x%x bytes): truncated?"
                                  % (seg.name or "''", seg.filesize, seg.fileoff, image.region.size),
                                  DecodeKind.TRUNCATED)
            start = seg.vmaddr + self.slide
            pieces.append((start, start + seg.vmsize, seg.fileoff, min(seg.filesize, seg.vmsize),
                           bool(seg.initprot & 4)))
        self._lay_out(pieces)
        # The header is in memory when a mapped segment starts at file offset 0.
        maps_header = image.filetype != mf.MH_OBJECT and any(
            seg.fileoff == 0 and seg.filesize and seg.initprot for seg in image.segments)
        self.header_address = image.text_vmaddr + self.slide if maps_header else None
        self._symbols = None

    def _file_bytes(self, offset, size):
        return self.image.region.read(offset, size)

    def section_module(self) -> Module:
        """The Module of an object file, from the load commands in the file
        (its header is not in any segment, so it cannot be read from memory)."""
        image = mf.MachO(self.image.region, load_address=self.image.text_vmaddr + self.slide)
        return module_from_macho(image, os.path.basename(self.path), self.path,
                                 self._starts[0] if self._starts else self.slide)

    def function_starts(self) -> list[int]:
        """Sorted start addresses of the function symbols (a compact entry may span several)."""
        return list(self._symbol_table()[0])

    def _read_symbols(self):
        return _function_symbols(self.image, self.slide)


def _load_commands(image):
    """(cmd, offset) of every load command (the MachO decoder has bounded them already)."""
    offset = image.header_size
    order = "<" if image.byteorder == "little" else ">"
    for _ in range(image.ncmds):
        cmd, size = struct.unpack(order + "2I", image.region.read(offset, 8))
        yield cmd, offset
        offset += size


def _function_symbols(image, slide):
    """([start], [(start, end, name)]) of the symbols defined in executable
    sections; a symbol ends where the next one (or its section) does. The
    leading underscore C names get in Mach-O is dropped, as LLDB does."""
    order = "<" if image.byteorder == "little" else ">"
    symtab = next((off for cmd, off in _load_commands(image) if cmd == LC_SYMTAB), None)
    if symtab is None:
        return [], []
    symoff, nsyms, stroff, strsize = struct.unpack(order + "4I", image.region.read(symtab + 8, 16))
    entry_size = 16 if image.is_64 else 12
    table = image.region.read(symoff, nsyms * entry_size)
    strings = image.region.read(stroff, strsize)
    executable = {}
    index = 0
    for seg in image.segments:
        for section in seg.sections:
            index += 1
            if seg.initprot & 4:
                executable[index] = section
    found = {}
    for i in range(nsyms):
        if image.is_64:
            strx, kind, sect, _desc, value = struct.unpack_from(order + "IBBHQ", table, i * entry_size)
        else:
            strx, kind, sect, _desc, value = struct.unpack_from(order + "IBBHI", table, i * entry_size)
        if kind & N_STAB or kind & N_TYPE != N_SECT or sect not in executable or strx >= strsize:
            continue
        end = strings.find(b"\0", strx)
        name = strings[strx:end if end >= 0 else strsize].decode("latin-1")
        if name.startswith("_"):
            name = name[1:]
        found.setdefault(value, (name, executable[sect]))
    starts = sorted(found)
    entries = []
    for n, start in enumerate(starts):
        name, section = found[start]
        end = section.addr + section.size
        if n + 1 < len(starts) and starts[n + 1] < end:
            end = starts[n + 1]
        entries.append((start + slide, end + slide, name))
    return [e[0] for e in entries], entries
