"""A Target made of an ELF file laid out in memory as the loader would.

Each PT_LOAD segment is placed at its link address plus a bias, so module
discovery, `.eh_frame_hdr`
lookups and every table read go through the same memory path as in a live
debugger. Files without program headers (relocatable objects) have their
allocated sections placed at their sh_addr instead.

Only what the file holds is laid out: a segment's zero fill past p_filesz
(.bss) is left unmapped, since no unwind table lives there and a hostile
p_memsz would otherwise have the decoders walk gigabytes of zeros. The file
is mapped (mmap), never read whole; only regular files are opened (a FIFO
would block, /dev/zero never ends).
"""
from __future__ import annotations

import bisect
import mmap
import os
import stat

from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE

from plugin import arch as arches
from plugin.errors import MemoryReadError, guard
from plugin.formats.elf import PT_LOAD, ProgramHeader, header_link_address
from plugin.file_targets import object_layout
from plugin.modules import on_disk
from plugin.modules.module import Module, Segment
from plugin.target import Mapping, ModuleRef, Target


class LaidOutFile(Target):
    """A file's pieces placed in memory: (start, end, file offset, file size, executable).

    Bytes past a piece's file size read as zero (like .bss); subclasses say
    how to read the file (`_file_bytes`) and set path, header_address and
    the pieces with `_lay_out`.
    """

    path = None
    header_address = None
    _symbols = None
    name = "file"

    def _lay_out(self, pieces):
        self._pieces = sorted(pieces)
        self._starts = [p[0] for p in self._pieces]

    def _file_bytes(self, offset, size):
        raise NotImplementedError

    def read_memory(self, address: int, size: int) -> bytes:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            start, end, offset, filesz, _ = self._pieces[i]
            if address + size <= end:
                rel = address - start
                data = self._file_bytes(offset + rel, min(size, filesz - rel)) if rel < filesz else b""
                return data + bytes(size - len(data))
        raise MemoryReadError(address, size, "not mapped by %s" % os.path.basename(self.path))

    def modules(self) -> list[ModuleRef]:
        if self.header_address is None:
            return []
        return [ModuleRef(os.path.basename(self.path), self.header_address, self.path)]

    def mappings(self) -> list[Mapping]:
        return [Mapping(s, e, True, False, x, self.path) for s, e, _, _, x in self._pieces]

    # Symbols: every look-up (a dump naming a personality routine, explain naming a
    # function) goes through here. They are read on first use, after the file was opened
    # and judged usable, so a damaged symbol table is met here: it costs the names only,
    # and says so once in `problems` (render/tables.py reports them under the dump).

    @property
    def problems(self) -> list:
        """What went wrong reading the file after it was opened, not yet reported."""
        if "_problems" not in self.__dict__:
            self._problems = []
        return self._problems

    def symbol(self, address: int) -> tuple[str, int] | None:
        return symbol_in(self._symbol_table(), address)

    def _symbol_table(self) -> tuple:
        if self._symbols is None:
            self._symbols = ([], [])
            with guard(self.problems, "%s: symbols not read (functions are not named)" % self.name):
                self._symbols = self._read_symbols()
        return self._symbols

    def _read_symbols(self) -> tuple:
        """([start], [(start, end, name)]) of the file's function symbols."""
        return [], []


def symbol_in(table: tuple[list, list], address: int) -> tuple[str, int] | None:
    """(name, start) from a ([starts], [(start, end, name)]) table, or None."""
    starts, entries = table
    i = bisect.bisect_right(starts, address) - 1
    if i >= 0:
        start, end, name = entries[i]
        if start <= address < max(end, start + 1):
            return name, start
    return None


class FileTarget(LaidOutFile):
    """An ELF file: PT_LOAD segments at their link address plus a bias."""

    section_bases: dict = {}        # an object file's: section index -> address (object_layout.py)
    relocated_cfi: dict = {}        # an object file's: ".eh_frame" -> (address, relocated bytes, how)

    def __init__(self, path: str, base: int | None = None) -> None:
        self.path = path
        self._data = map_regular_file(path)
        elf = ELFFile(self._data)
        self.elf = elf
        self.name = os.path.basename(path)
        self.relocatable = elf["e_type"] == "ET_REL"     # see plugin/file_targets/object_file.py
        self.file_size = len(self._data)
        self.arch = arches.BY_ELF_MACHINE.get(_machine_number(elf))
        if self.arch is None:
            raise ValueError("unsupported ELF machine %s" % elf["e_machine"])
        if elf.elfclass != 8 * self.arch.address_size:      # x32: 32-bit ELF, x86-64 code
            raise ValueError("%d-bit ELF for %s (%s) is not supported" % (
                elf.elfclass, self.arch.name, "the x32 ABI" if self.arch.name == "x86_64" else "an ILP32 ABI"))
        loads = [ProgramHeader(PT_LOAD, s["p_flags"], s["p_offset"], s["p_vaddr"], s["p_filesz"],
                               s["p_memsz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        pieces = []
        if loads:
            low = header_link_address(loads)
            self.bias = 0 if base is None else base - low
            for p in loads:
                start = self.bias + p.vaddr
                size = min(p.memsz, p.filesz, max(0, len(self._data) - p.offset))
                if size:
                    pieces.append((start, start + size, p.offset, size, p.executable))
            self.header_address = self.bias + low
            if elf["e_type"] == "ET_EXEC" and not any(p.offset == 0 for p in loads):
                # No segment maps the ELF header (a kernel's vmlinux): the module is
                # built from the sections, as for a file without program headers.
                self.header_address = None
        else:
            self.bias = 0 if base is None else base
            sections = list(elf.iter_sections())
            if self.relocatable and not any(sec["sh_addr"] for sec in sections):
                # an object file: its sections placed as a linker would, its CFI relocated to match
                self.section_bases = object_layout.section_bases(elf)
                with guard(self.problems, "relocations of the object's CFI not applied"):
                    self.relocated_cfi = object_layout.relocated_cfi(elf, self.arch, self.section_bases,
                                                                     self.problems)
            for index, sec in enumerate(sections):
                size = min(sec["sh_size"], max(0, len(self._data) - sec["sh_offset"]))
                if sec["sh_flags"] & 2 and sec["sh_type"] != "SHT_NOBITS" and size:
                    start = self.bias + self.section_bases.get(index, sec["sh_addr"])
                    pieces.append((start, start + size, sec["sh_offset"], size, bool(sec["sh_flags"] & 4)))
            self.header_address = None
        self._lay_out(pieces)

    def _file_bytes(self, offset, size):
        return self._data[offset:offset + size]

    def section_module(self) -> Module:
        """A Module for a file without program headers (an object file), built from its sections."""
        module = Module(name=os.path.basename(self.path), path=self.path, header_address=self.bias,
                        arch=self.arch, load_bias=self.bias)
        module.segments = [Segment(s, e, x, off) for s, e, off, _, x in self._pieces]
        return module

    def _read_symbols(self) -> tuple:
        return function_table(self.elf, self.bias, self.section_bases)


def map_regular_file(path: str) -> mmap.mmap:
    """The file mapped read-only; ValueError for anything but a non-empty regular file."""
    with open(path, "rb", buffering=0, opener=_open_nonblocking) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size == 0:
            raise ValueError("empty file")
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _open_nonblocking(path, flags):
    return os.open(path, flags | os.O_NONBLOCK)     # a FIFO must not block the open


def _machine_number(elf):
    machine = elf["e_machine"]
    return machine if isinstance(machine, int) else ENUM_E_MACHINE.get(machine)


def function_table(elf, bias: int, section_bases: dict | None = None) -> tuple:
    """A file's function symbols at load bias `bias` (an object's: at their section's place,
    section_bases): (sorted starts, [(start, end, name)])."""
    entries = []
    for sym in on_disk.function_symbols(elf):
        start = bias + sym["st_value"] + (section_bases or {}).get(sym["st_shndx"], 0)
        entries.append((start, start + sym["st_size"], sym.name))
    entries.sort()
    return [e[0] for e in entries], entries
