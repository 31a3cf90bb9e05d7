"""The core's Target over GDB: memory, modules, mappings, symbols, registers.

Modules come from the process's mappings: every mapping at file offset 0
that starts with an ELF header is a module, the vdso included (it exists
only in memory). Where /proc is not reachable (remote targets such as
qemu's gdbstub) the objfiles GDB knows are located through `info
sharedlibrary` and the executable's entry point instead.
"""

import os
import re

import gdb

from plugin import arch as arches
from plugin.errors import MemoryReadError
from plugin.modules import on_disk
from plugin.target import Mapping, ModuleRef, Target


class GdbTarget(Target):
    def __init__(self):
        self.generation = 0
        self._modules = None
        self._mappings = None
        self._arch_name = None
        self.arch = None
        self.reads = 0          # memory reads made, for the benchmark's reads-per-frame figure

    # -- lifecycle -----------------------------------------------------------
    def invalidate(self):
        """Modules changed (new objfile, exit...): forget everything derived from them."""
        self.generation += 1
        self._modules = None
        self._mappings = None

    def set_arch(self, gdb_arch_name):
        if gdb_arch_name != self._arch_name:
            self.arch = arches.by_name(gdb_arch_name)
            self._arch_name = gdb_arch_name
        return self.arch

    # -- memory --------------------------------------------------------------
    def read_memory(self, address, size):
        self.reads += 1
        try:
            return bytes(gdb.selected_inferior().read_memory(address, size))
        except (gdb.MemoryError, gdb.error, OverflowError, ValueError) as exc:
            raise MemoryReadError(address, size, str(exc)) from None

    # -- modules and mappings --------------------------------------------------
    def mappings(self):
        if self._mappings is None:
            # /proc/PID is this machine's process PID only on a native
            # target: qemu's gdbstub calls its process 1, which here is
            # another program entirely.
            self._mappings = _proc_maps(gdb.selected_inferior().pid) if _is_native() else []
        return self._mappings

    @property
    def mappings_known(self):
        """False where no mapping list can be had (remote stubs, cores without /proc)."""
        return bool(self.mappings())

    def modules(self):
        if self._modules is None:
            self._modules = self._modules_from_maps() or self._modules_from_gdb()
        return self._modules

    def _modules_from_maps(self):
        refs, seen = [], set()
        for m in self.mappings():
            if m.name in seen or not m.readable:
                continue
            if not (m.name.startswith("/") or m.name == "[vdso]"):
                continue
            if m.offset != 0:
                continue
            try:
                if self.read_memory(m.start, 4) != b"\x7fELF":
                    continue
            except MemoryReadError:
                continue
            seen.add(m.name)
            path = m.name if m.name.startswith("/") else None
            refs.append(ModuleRef(os.path.basename(m.name) if path else m.name, m.start, path))
        return refs

    def _modules_from_gdb(self):
        """Remote targets: header addresses from GDB's own solib list and entry point."""
        refs = []
        try:
            text = gdb.execute("info sharedlibrary", to_string=True)
        except gdb.error:
            text = ""
        for line in text.splitlines():
            match = re.match(r"\s*(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+\S+\s+(?:\(\*\)\s+)?(/\S+)", line)
            if not match:
                continue
            text_start, path = int(match.group(1), 16), match.group(2)
            base = _header_from_section(path, ".text", text_start)
            if base is not None:
                refs.append(ModuleRef(os.path.basename(path), base, path))
        exe = gdb.current_progspace().filename
        if exe:
            try:
                info = gdb.execute("info files", to_string=True)
            except gdb.error:
                info = ""
            match = re.search(r"Entry point: (0x[0-9a-f]+)", info)
            if match:
                base = _header_from_entry(exe, int(match.group(1), 16))
                if base is not None:
                    refs.insert(0, ModuleRef(os.path.basename(exe), base, exe))
        return refs

    # -- symbols ----------------------------------------------------------------
    def symbol(self, address):
        try:
            block = gdb.block_for_pc(address)
        except (RuntimeError, gdb.error):
            block = None
        while block is not None and block.function is None:
            block = block.superblock
        if block is not None and block.function is not None:
            return block.function.print_name, block.start
        try:
            text = gdb.execute("info symbol 0x%x" % address, to_string=True)
        except gdb.error:
            return None
        match = re.match(r"(\S+)(?: \+ (\d+))? in section", text)
        if not match:
            return None
        return match.group(1), address - int(match.group(2) or 0)


def _is_native():
    """Is the selected inferior a process on this machine (not a remote stub or a core)?"""
    connection = getattr(gdb.selected_inferior(), "connection", None)   # GDB 12 and later
    return connection is None or connection.type == "native"


def _proc_maps(pid):
    out = []
    try:
        with open("/proc/%d/maps" % pid) as handle:
            lines = handle.read().splitlines()
    except (OSError, TypeError):
        return out
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        perms = parts[1]
        out.append(Mapping(start, end, perms[0] == "r", perms[1] == "w", perms[2] == "x",
                           parts[5].strip() if len(parts) > 5 else "", int(parts[2], 16)))
    return out


def _lowest_load(path):
    return on_disk.link_layout(path)


def _header_from_section(path, name, runtime_address):
    info = on_disk.sections(path).get(name)
    if info is None:
        return None
    low, _ = _lowest_load(path)
    return runtime_address - info.address + low


def _header_from_entry(path, runtime_entry):
    try:
        low, entry = _lowest_load(path)
    except (OSError, ValueError):
        return None
    return runtime_entry - (entry & ~1 if entry & 1 and not runtime_entry & 1 else entry) + low   # Thumb entry: GDB drops bit 0
