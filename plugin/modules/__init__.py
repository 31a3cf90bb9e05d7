"""Module discovery: each loaded module's segments and unwind tables, read from memory.

One package, no import cycle:

  model.py     Module, Segment, TableLocation, region_of: what discovery builds
  elf.py       ELF images: ELF and program headers read from the debuggee's
               memory (decoded by plugin.formats.elf)
  macho.py     Mach-O images: the mach_header and load commands in memory
  pe.py        PE images (x64, ARM64): DOS, PE and section headers in memory;
               scan_mappings finds images no debugger lists, by their headers
  on_disk.py   what is read from files on disk, and only that: `.debug_frame`
               (never loaded) and `.eh_frame` found by section headers when
               no `.eh_frame_hdr` points at it; those tables are marked with
               where they came from
  __init__.py  discover() (by magic) and ModuleMap, the per-generation list
"""
from __future__ import annotations

import bisect
from typing import NamedTuple

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats.elf import ELF_MAGIC
from plugin.modules.elf import discover_elf
from plugin.modules.macho import discover_macho, is_macho_magic
from plugin.modules.pe import discover_pe
from plugin.formats.pe import is_pe
from plugin.modules.model import Module, Segment, TableLocation, region_of
from plugin.target import ModuleRef, Target

__all__ = ["Module", "ModuleMap", "Segment", "TableLocation", "Unreadable", "discover", "discover_elf",
           "region_of"]


class Unreadable(NamedTuple):
    """A module the debugger lists but whose headers could not be read."""
    ref: ModuleRef
    reason: str


def discover(target: Target, ref: ModuleRef) -> Module:
    """Module for ref (ELF, Mach-O or PE); DecodeError/MemoryReadError if unreadable."""
    magic = target.read_memory(ref.header_address, 4)
    if magic == ELF_MAGIC:
        return discover_elf(target, ref)
    if is_macho_magic(magic):
        return discover_macho(target, ref)
    if is_pe(magic):
        return discover_pe(target, ref)
    raise DecodeError("module header", 0, "no ELF, Mach-O or PE (MZ) magic at 0x%x" % ref.header_address)


class ModuleMap:
    """The target's modules, discovered once per module-list generation.

    Modules that cannot be read are kept in `failed` with the reason, so
    `unwind modules` can say why a library has no tables.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.generation = None
        self.modules: list[Module] = []
        self.failed: list[Unreadable] = []
        self._starts = []

    def refresh(self) -> None:
        generation = getattr(self.target, "generation", 0)
        if generation == self.generation:
            return
        self.generation = generation
        self.modules, self.failed = [], []
        for ref in self.target.modules():
            try:
                self.modules.append(discover(self.target, ref))
            except (DecodeError, MemoryReadError) as exc:
                self.failed.append(Unreadable(ref, str(exc)))
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def add(self, module: Module) -> None:
        """Add a module that was not discovered from memory (an object file's sections)."""
        self.refresh()
        self.modules.append(module)
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def find(self, address: int) -> Module | None:
        """The module whose mapped segments contain address, or None."""
        self.refresh()
        i = bisect.bisect_right(self._starts, address) - 1
        # Segments of neighbouring modules may interleave; look a little back.
        for module in self.modules[max(0, i - 2):i + 1][::-1]:
            if module.contains(address):
                return module
        return None

    def all(self) -> list[Module]:
        self.refresh()
        return list(self.modules)
