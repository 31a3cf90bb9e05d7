"""The core's Target over GDB: memory, modules, mappings, symbols, registers.

Modules come from the process's mappings: every mapping at file offset 0
that starts with an ELF header is a module, the vdso included (it exists
only in memory), and so is every PE image that starts a mapping (a file
mapped from offset 0, or anonymous memory a loader copied it into: Wine,
or a program loading one itself), found by its headers
(plugin.modules.pe.scan_mappings). Where /proc is not reachable (remote targets such as
qemu's gdbstub, core files) the objfiles GDB has loaded are the modules,
located without running a GDB command (see objfiles.py): the unwinder
calls this code while GDB builds frames, and a command run from there
(`info sharedlibrary`) re-enters frame building and crashes GDB 13.
Outside the unwinder the slower command-based lookups are used as well.
"""

from __future__ import annotations

import os
import re

import gdb

from plugin import arch as arches
from plugin.cache import BoundedCache
from plugin.errors import MemoryReadError
from plugin.modules.core import CoreFiles, core_of
from plugin.modules.pe import scan_mappings
from plugin.memory import PAGE, PageCache
from plugin.strategies.planted import VERDICTS_SIZE
from plugin.target import Mapping, ModuleRef, Target

from . import compat, objfiles

# The unwinder's page cache reads this much at a time: a native process pays per read (a ptrace
# round trip) and little per byte; a remote stub pays per byte too (QEMU's gdbstub, Debian's 6.1
# kernel under TCG: one read of 8 bytes 0.024 ms, 512 bytes 0.056 ms, 4096 bytes 0.261 ms). The
# first `bt` of a 19-frame kernel stop, caches dropped, median of 9, three rounds alike: pages of
# 4096 bytes 4.4 ms (7 reads), 1024 3.3 ms (8), 512 3.4 ms (10), 256 3.8 ms (15), 128 4.4 ms (22).
REMOTE_PAGE = 1024
MAX_PAGES = 2048


def _shared_setting(name, what):
    """A setting the target carries: every inferior's target shares it when a shared holder is given."""
    own = "_own_" + name

    def get(self):
        return getattr(self._shared, name) if self._shared is not None else getattr(self, own)

    def put(self, value):
        setattr(self._shared if self._shared is not None else self, name if self._shared is not None else own, value)
    return property(get, put, doc=what + ": shared by every inferior's target when a shared holder is given.")


class GdbTarget(Target):
    def __init__(self, shared=None):
        self._generation = 0
        self._shared = shared
        self._own_scan_words = None
        self._own_trap_handler_names = ()
        self._modules = None
        self._modules_complete = False   # computed outside the unwinder (GDB commands allowed)
        self._mappings = None
        self._arch_name = None
        self.arch = None
        self.stops = 0          # stops and resumes seen (forget_mappings)
        self.reads = 0          # memory reads made, for the benchmark's reads-per-frame figure
        self.inside_unwinder = False     # set by the unwinder: no GDB command may run now
        self.gdb_arch = None             # the gdb.Architecture that self.arch was set from
        self.descriptors = {}            # its register name -> gdb.RegisterDescriptor
        self._pages = PageCache(self._read_memory, max_pages=MAX_PAGES)
        self._granule = None            # the stop count when the page size was chosen for this target
        self.code_verdicts = BoundedCache("code verdicts", VERDICTS_SIZE)   # planted.py's, per pc: code bytes, symbols
        self._core = None                # (pid, CoreFiles or None) of a core GDB opened

    scan_words = _shared_setting("scan_words", "`set unwind scan-words`")
    trap_handler_names = _shared_setting("trap_handler_names", "`set unwind trap-handler-names`")

    # -- lifecycle -----------------------------------------------------------
    def invalidate(self):
        """Modules changed (new objfile, exit...): forget everything derived from them."""
        self._generation += 1
        self._modules = None
        self._mappings = None
        self._pages.clear()
        self.code_verdicts.clear()
        self._core = None

    def forget_mappings(self):
        """The process ran or was changed: its mappings (stacks, JIT code) may differ."""
        self.stops += 1         # ModuleMap looks for a kernel not yet in memory again after a stop
        self._mappings = None
        self._pages.clear()
        self.code_verdicts.clear()

    def set_arch(self, gdb_arch_name):
        if gdb_arch_name != self._arch_name:
            self.gdb_arch = None
            self.arch = arches.by_name(gdb_arch_name)
            self._arch_name = gdb_arch_name
        return self.arch

# -- memory --------------------------------------------------------------
    def read_memory(self, address, size):
        """Inside the unwinder through a page cache (dropped with the mappings at every stop,
        resume, memory or register write, and module change); elsewhere straight from GDB."""
        if self.inside_unwinder:
            if self._granule != self.stops:
                self._granule = self.stops
                self._pages.resize(_page_size(gdb.selected_inferior()))
            return self._pages.read(address, size)
        return self._read_memory(address, size)

    def read_exact(self, address: int, size: int) -> bytes:
        return self._read_memory(address, size)

    def _read_memory(self, address, size):
        self.reads += 1
        try:
            return bytes(gdb.selected_inferior().read_memory(address, size))
        except (gdb.MemoryError, gdb.error, OverflowError, ValueError) as exc:
            files = self.core_files()       # a core leaves out what the process never wrote
            data = files.read(address, size) if files is not None else None
            if data is None:
                raise MemoryReadError(address, size, str(exc)) from None
            return data

    def core_files(self):
        """The CoreFiles of the core GDB opened for the selected inferior (its mapping list, and the
        files named there), or None when it is no core or the core file cannot be found."""
        inferior = gdb.selected_inferior()
        if self._core is None or self._core[0] != inferior.pid:
            core = _core_of(inferior)
            self._core = (inferior.pid, CoreFiles(core, self._core_bytes) if core is not None else None)
        return self._core[1]

    def _core_bytes(self, address, size):
        return bytes(gdb.selected_inferior().read_memory(address, size))

    # -- modules and mappings --------------------------------------------------
    def mappings(self):
        if self._mappings is None:
            # /proc/PID is this machine's process PID only on a native
            # target: qemu's gdbstub calls its process 1, which here is
            # another program entirely.
            if _is_native():
                self._mappings = _proc_maps(gdb.selected_inferior().pid)
            else:           # a core's own mapping list (NT_FILE), where GDB has a core open
                files = self.core_files()
                self._mappings = list(files.core.mappings) if files is not None else []
        return self._mappings

    @property
    def mappings_known(self):
        """False where no mapping list can be had (remote stubs, cores without /proc)."""
        return bool(self.mappings())

    @property
    def generation(self):
        """Bumped whenever the module list changes; ModuleMap re-reads it then."""
        if self._modules is not None and not self._modules_complete and not self.inside_unwinder:
            # Found inside the unwinder, where GDB commands cannot run: now
            # they can, so look again (and tell the module map it changed).
            self._modules = None
            self._generation += 1
        return self._generation

    def modules(self):
        if self._modules is None:
            refs = self._modules_from_maps()
            if refs and not _is_native():       # a core's files: and GDB's in-memory objfiles (the vdso)
                known = {ref.header_address for ref in refs}
                refs += [ref for ref in objfiles.module_refs(gdb.selected_inferior().progspace)
                         if ref.header_address not in known]
            self._modules_complete = bool(refs) or not self.inside_unwinder
            self._modules = refs or self._modules_from_gdb()
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
        return refs + scan_mappings(self, self.mappings(), {ref.header_address for ref in refs})

    def _modules_from_gdb(self):
        """Remote targets and cores: GDB's objfiles, located without GDB commands where possible."""
        progspace = gdb.selected_inferior().progspace
        refs = objfiles.module_refs(progspace)
        if self.inside_unwinder:
            return refs + objfiles.link_map_refs(progspace, refs, self.read_memory)
        known = {ref.path for ref in refs}
        return refs + [ref for ref in objfiles.refs_from_commands() if ref.path not in known]

    def symbol_files(self):
        """The files GDB loaded symbols from, on a remote stub only (QEMU's gdbstub): there the Linux
        kernel, which has no ELF header in memory, is found from its symbol file (plugin.modules.kernel)."""
        if _is_native() or self.core_files() is not None:
            return []
        return objfiles.symbol_files(gdb.selected_inferior().progspace)

    # -- symbols ----------------------------------------------------------------
    def symbol(self, address):
        try:
            block = gdb.block_for_pc(address)
        except (RuntimeError, gdb.error):
            block = None
        function = None         # the outermost function block: the physical frame's own function,
        while block is not None:    # not one inlined into it
            if block.function is not None:
                function = block
            block = block.superblock
        if function is not None:
            return function.function.print_name, function.start
        if self.inside_unwinder:
            return None         # minimal symbols need `info symbol`, a command
        try:
            text = gdb.execute("info symbol 0x%x" % address, to_string=True)
        except gdb.error:
            return None
        match = re.match(r"(\S+)(?: \+ (\d+))? in section", text)
        if not match:
            return None
        return match.group(1), address - int(match.group(2) or 0)


def _core_of(inferior):
    """The Core GDB has open for inferior, or None. GDB 12 and later name a core target; GDB 10
    and 11 name no target, and a core file GDB holds open for the inferior's pid says it is one."""
    if not inferior.pid:
        return None
    if not hasattr(inferior, "connection"):         # GDB 10 and 11
        return core_of(inferior.pid)
    connection = inferior.connection
    return core_of(inferior.pid) if connection is not None and connection.type == "core" else None


def _page_size(inferior) -> int:
    connection = getattr(inferior, "connection", None)      # GDB 12 and later
    if connection is not None:
        return REMOTE_PAGE if connection.type in ("remote", "extended-remote") else PAGE
    return PAGE if compat.is_native(inferior) or _core_of(inferior) is not None else REMOTE_PAGE


def _is_native():
    """Is the selected inferior a process on this machine (not a remote stub or a core)?"""
    return compat.is_native(gdb.selected_inferior())


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
