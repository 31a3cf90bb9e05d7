"""The Target protocol: what the core needs from a debugger, and a snapshot.

A Target reads memory, lists loaded modules and names its architecture.
Debugger adapters implement it over gdb/lldb; tests and the offline command
use SnapshotTarget (registers plus memory regions) or FileTarget (an ELF
file laid out in memory the way the loader would).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from plugin.errors import MemoryReadError


@dataclass(frozen=True)
class ModuleRef:
    """A loaded module: where its header is in memory and where its file is."""
    name: str
    header_address: int        # address of the ELF / Mach-O header in memory
    path: str = None           # file on disk (None for the vdso and JIT code)


@dataclass(frozen=True)
class Mapping:
    """One memory mapping of the process (from /proc/PID/maps or the debugger)."""
    start: int
    end: int
    readable: bool = True
    writable: bool = False
    executable: bool = False
    name: str = ""
    offset: int = 0            # file offset of the mapping's first byte

    def contains(self, address):
        return self.start <= address < self.end


class Target:
    """Base class documenting the protocol; adapters override every method.

    read_memory(address, size) -> bytes, or raise MemoryReadError
    modules() -> list of ModuleRef
    mappings() -> list of Mapping (may be empty when the debugger cannot say)
    symbol(address) -> (name, start) or None
    symbol_files() -> paths of the symbol files the debugger loaded, where modules cannot be
        found from headers in memory (a kernel under a remote stub); optional
    generation -> an int that changes whenever the module list changes
    """
    arch = None
    generation = 0
    mappings_known = True       # False: mappings() cannot be had (a remote stub without /proc)
    # True while the debugger runs the plugin as its own frame unwinder (GDB's sniffer): fewer
    # symbols can be looked up and no debugger command may run. The adapter sets it.
    inside_unwinder = False
    # A plugin.cache.BoundedCache the adapter clears at every stop and module change, where
    # strategies/planted.py keeps its verdicts on code bytes and symbols per pc; None: the
    # target keeps none.
    code_verdicts = None

    def read_memory(self, address, size):
        raise NotImplementedError

    def read_exact(self, address: int, size: int) -> bytes:
        """`size` bytes at `address` read as they are, not through a cache that reads whole blocks:
        for the few words of the kernel's own lists read at every stop (over a remote stub a block
        costs more than the bytes needed). Where no such cache exists it is read_memory."""
        return self.read_memory(address, size)

    def modules(self):
        return []

    def mappings(self):
        return []

    def symbol(self, address):
        return None

    def read_pointer(self, address):
        data = self.read_memory(address, self.arch.address_size)
        return int.from_bytes(data, self.arch.byteorder)


@dataclass
class SnapshotTarget(Target):
    """Registers plus memory regions captured at one moment.

    regions: list of (address, bytes); reads may not straddle a gap.
    """
    arch: object
    regions: list = field(default_factory=list)
    module_refs: list = field(default_factory=list)
    registers: dict = field(default_factory=dict)
    mapping_list: list = field(default_factory=list)
    symbols: list = field(default_factory=list)    # (start, end, name)

    def read_memory(self, address, size):
        for start, data in self.regions:
            if start <= address and address + size <= start + len(data):
                return bytes(data[address - start:address - start + size])
        raise MemoryReadError(address, size, "not in the snapshot")

    def modules(self):
        return list(self.module_refs)

    def mappings(self):
        return list(self.mapping_list)

    def symbol(self, address):
        for start, end, name in self.symbols:
            if start <= address < end:
                return name, start
        return None
