"""Module discovery: each loaded module's segments and unwind tables, read from memory.

One package, no import cycle:

  module.py    Module, Segment, TableLocation, region_of: what discovery builds
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

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.formats.elf import ELF_MAGIC
from plugin.modules.elf import discover_elf
from plugin.modules.kernel import KERNEL_NAME, discover_kernel, loaded_modules
from plugin.modules.macho import discover_macho, is_macho_magic
from plugin.modules.pe import discover_pe
from plugin.formats.pe import is_pe
from plugin.modules.module import Module, ModuleFormat, Segment, TableLocation, region_of
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
    raise DecodeError("module header", 0, "no ELF, Mach-O or PE (MZ) magic at 0x%x" % ref.header_address,
                      DecodeKind.MALFORMED)


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
        self._kernel_retry = None       # the target's stop count when the kernel's symbols were found but not it
        self._modules_read = None       # the target's stop count when the kernel's module list was read
        self._kernel = None             # the kernel's own image (a Module), where it is one of them

    def refresh(self, address: int | None = None) -> None:
        """Discover the modules again where the target's module list changed. With a kernel, its
        module list is read again at a new stop (insmod and rmmod happen while the kernel runs),
        unless the caller asks about one address that lies in the kernel's own image, which no
        module load or unload moves."""
        kernel = self._kernel
        self._refresh(address is None or kernel is None or not kernel.contains(address))

    def kernel(self) -> Module | None:
        """The kernel's own image, where it is one of the modules (its module list not read again)."""
        self._refresh(False)
        return self._kernel

    def _refresh(self, kernel_modules: bool) -> None:
        generation = getattr(self.target, "generation", 0)
        if generation == self.generation:
            stops = getattr(self.target, "stops", 0)
            if self._kernel_retry is not None and self._kernel_retry != stops:
                self._add_kernel()      # its symbols were there, the kernel not yet: look again at a new stop
                self._sort()
            elif kernel_modules and self._modules_read is not None and self._modules_read != stops:
                self._add_kernel_modules()
                self._sort()
            return
        self.generation = generation
        self.modules, self.failed, self._kernel, self._modules_read = [], [], None, None
        for ref in self.target.modules():
            try:
                self.modules.append(discover(self.target, ref))
            except (DecodeError, MemoryReadError) as exc:
                self.failed.append(Unreadable(ref, str(exc)))
        self._add_kernel()
        self._sort()

    def _sort(self) -> None:
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def _add_kernel_modules(self) -> None:
        """The loaded kernel modules, read from the kernel's module list (kept where unchanged, with
        their decoded tables)."""
        self._modules_read = getattr(self.target, "stops", 0)
        kernel = self._kernel
        old = {(m.name, m.header_address): m for m in self.modules if m.format == ModuleFormat.KERNEL and m is not kernel}
        self.modules = [m for m in self.modules if m.format != ModuleFormat.KERNEL or m is kernel]
        self.modules.extend(loaded_modules(kernel, self.target.read_exact, old))

    def _add_kernel(self) -> None:
        """The Linux kernel, found from a symbol file's symbols (it has no ELF header in memory):
        only where the target names symbol files (a remote stub) and no module holds it already."""
        self._kernel_retry = None
        paths = getattr(self.target, "symbol_files", lambda: [])()
        if not paths or getattr(self.target.arch, "name", None) != "x86_64":
            return
        kernel = discover_kernel(paths, self.target.read_memory, self.target.arch)
        if isinstance(kernel, str):     # symbols, but no kernel in memory (not booted yet, or another build)
            self._kernel_retry = getattr(self.target, "stops", 0)
            self.failed = [f for f in self.failed if f.ref.name != KERNEL_NAME]
            self.failed.append(Unreadable(ModuleRef(KERNEL_NAME, 0, None), kernel))
            return
        self.failed = [f for f in self.failed if f.ref.name != KERNEL_NAME]
        if kernel is None or any(kernel.contains(s.start) for m in self.modules for s in m.segments):
            return
        self.modules.append(kernel)
        self._kernel = kernel
        # its symbol file is no module of its own: GDB's objfile has no header in memory
        self.failed = [f for f in self.failed if f.ref.path != kernel.path]
        self._add_kernel_modules()

    def add(self, module: Module) -> None:
        """Add a module that was not discovered from memory (an object file's sections)."""
        self.refresh()
        self.modules.append(module)
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def find(self, address: int) -> Module | None:
        """The module whose mapped segments contain address, or None."""
        self.refresh(address)
        i = bisect.bisect_right(self._starts, address) - 1
        # Segments of neighbouring modules may interleave; look a little back.
        for module in self.modules[max(0, i - 2):i + 1][::-1]:
            if module.contains(address):
                return module
        return None

    def all(self) -> list[Module]:
        self.refresh()
        return list(self.modules)
