"""The core's Target over LLDB: memory, modules, mappings and symbols.

Two shapes, because LLDB can hold a target with no process:

- live: a stopped process. Memory comes from SBProcess.ReadMemory, modules
  are every SBModule with a load address (the vdso included: LLDB lists it
  and its header is only in memory), mappings from SBProcess.GetMemoryRegions
  (walked region by region for a scripted process, whose GetMemoryRegions
  LLDB 16 gets wrong: see lldb_commands/scripted_process.py).
- a core (kernel, gcore, `process save-core` minidump): like live, but a
  read the core cannot serve whole is retried page by page, each page
  missing from the core taken from its module's file if it lies in a
  section that is not writable (see _read_core).
- static: `lldb-16 some.so` before `run`. There is no address space, only
  file addresses, and every module's start at its own link address (0 for
  each PIE and shared library), so two modules could claim the same address.
  A static LldbTarget therefore shows exactly one module, at its file
  addresses, and reads through SBTarget.ReadMemory on addresses resolved in
  that module: the same addresses `python -m plugin tables FILE` prints.
  Mach-O files work the same way (`lldb-16 libfoo.dylib`, an executable):
  LLDB 16 on Linux loads them as static targets, the header is the start of
  __TEXT (file offset 0), and plugin.modules.discover reads the load
  commands from there (plugin/macho_modules.py); __PAGEZERO holds no file
  data, so nothing is read from it.
"""

import os

import lldb

from plugin import arch as arches
from plugin.errors import MemoryReadError
from plugin.memory import PageCache
from plugin.modules.pe import scan_mappings

from .fast import Plans
from plugin.target import Mapping, ModuleRef, Target

# Process states in which memory and registers can be read.
_STOPPED = (lldb.eStateStopped, lldb.eStateCrashed, lldb.eStateSuspended)
# SBProcess.GetPluginName() of a scripted process (lldb_commands/scripted_process.py).
_SCRIPTED = "ScriptedProcess"
# SBProcess.GetPluginName() of core files (kernel cores, gcore, `process save-core`).
_CORES = ("elf-core", "mach-o-core", "minidump")
# A core holds memory in pieces: a failed read is retried one page at a time.
_PAGE = 4096
# A walk of the memory regions ends after this many (a process has a few thousand at most).
_MAX_REGIONS = 1 << 16


def live_process(sbtarget):
    """The target's process if it is stopped (readable), else None."""
    process = sbtarget.GetProcess() if sbtarget and sbtarget.IsValid() else None
    if process is None or not process.IsValid() or process.GetState() not in _STOPPED:
        return None
    return process


def arch_of(sbtarget):
    """The core's Arch for an LLDB target triple; KeyError if unsupported."""
    return arches.by_name(sbtarget.GetTriple() or "")


class LldbTarget(Target):
    def __init__(self, sbtarget, sbmodule=None):
        self.sbtarget = sbtarget
        self.sbmodule = sbmodule          # static targets only: the one module shown
        self.arch = arch_of(sbtarget)
        self.generation = 0
        self.reads = 0
        self._signature = None
        self._refs = []
        self._mappings = None
        self._stop_id = None
        self._process = None            # the stopped process, looked up once per command
        self._pages = PageCache(self._read_process)     # cleared at every command (refresh)
        self.plans = Plans()            # `unwind backtrace`'s per-pc plans (fast.py)
        self.refresh()

    @property
    def static(self):
        return self.sbmodule is not None

    @property
    def process(self):
        return None if self.static else live_process(self.sbtarget)

    # -- lifecycle ---------------------------------------------------------------
    def refresh(self):
        """Called at every command: notice module loads/unloads and resumes.

        LLDB gives Python no cheap module-change event, so the module list is
        compared with the last one seen (with the process id, so a re-run
        counts as a change) and the generation bumps when it differs; the
        ModuleMap then rediscovers. Mappings are dropped whenever the stop id
        moves, so nothing about the stack outlives a resume.
        """
        self._pages.clear()
        self._process = process = self.process
        stop_id = process.GetStopID() if process else None
        if stop_id != self._stop_id:
            self._stop_id = stop_id
            self._mappings = None
        refs = self._module_refs()
        if process is not None:     # PE images LLDB does not list (a loader mapped them): by their headers
            refs += scan_mappings(self, self.mappings(), {ref.header_address for ref in refs})
        signature = (process.GetUniqueID() if process else None,
                     tuple((r.name, r.header_address, r.path) for r in refs))
        if signature != self._signature:
            self._signature = signature
            self._refs = refs
            self.generation += 1
            self._mappings = None

    def resumed(self):
        """The process ran within a command (a step, a continue): nothing read before holds."""
        self._pages.clear()
        self._mappings = None

    # -- memory --------------------------------------------------------------------
    def read_memory(self, address, size):
        if size <= 0:
            return b""
        if address < 0 or address + size > self.arch.mask + 1:
            raise MemoryReadError(address, size, "outside the address space")
        if self.static:
            self.reads += 1
            return self._read_file(address, size)
        return self._pages.read(address, size)

    def _read_process(self, address, size):
        """One read from the stopped process (through the page cache, see read_memory)."""
        self.reads += 1
        process = self._process
        if process is None or not process.IsValid():
            raise MemoryReadError(address, size, "the process is not stopped")
        error = lldb.SBError()
        data = process.ReadMemory(address, size, error)
        if error.Success() and data is not None and len(data) == size:
            return bytes(data)
        why = error.GetCString() or "short read"
        if process.GetPluginName() not in _CORES:
            raise MemoryReadError(address, size, why)
        return _read_core(self.sbtarget, process, address, size, why)

    def _read_file(self, address, size):
        """Read file addresses of the static module, one segment at a time.

        SBTarget.ReadMemory on a file address reads only up to the end of
        the section the address resolves to (the innermost one, say
        .eh_frame_hdr), so the read goes through the enclosing top-level
        section (the PT_LOAD segment) and continues across segments.
        """
        out = b""
        while len(out) < size:
            here = address + len(out)
            section = self.sbmodule.ResolveFileAddress(here).GetSection()
            if not section.IsValid():
                raise MemoryReadError(here, size - len(out), "not in any section of %s" % self._module_name())
            while section.GetParent().IsValid():
                section = section.GetParent()
            where = lldb.SBAddress(section, here - section.GetFileAddress())
            error = lldb.SBError()
            data = self.sbtarget.ReadMemory(where, size - len(out), error)
            if not error.Success() or not data:
                raise MemoryReadError(here, size - len(out),
                                      error.GetCString() or "no file data in %s" % section.GetName())
            out += bytes(data)
        return out

    # -- modules and mappings ------------------------------------------------------
    def modules(self):
        return list(self._refs)

    def _module_refs(self):
        sbmodules = [self.sbmodule] if self.static else list(self.sbtarget.module_iter())
        refs = []
        for sbmodule in sbmodules:
            header = sbmodule.GetObjectFileHeaderAddress()
            if not header.IsValid():
                continue
            address = header.GetFileAddress() if self.static else header.GetLoadAddress(self.sbtarget)
            if address == lldb.LLDB_INVALID_ADDRESS:
                continue               # listed but not loaded (yet)
            spec = sbmodule.GetFileSpec()
            path = spec.fullpath
            on_disk = path if path and os.path.isfile(path) else None     # None: the vdso, JIT code
            refs.append(ModuleRef(spec.GetFilename() or path or "0x%x" % address, address, on_disk))
        return refs

    def _module_name(self):
        return self.sbmodule.GetFileSpec().GetFilename() if self.static else "the target"

    @property
    def mappings_known(self):
        """False where the process gives no memory regions (qemu-user's gdbstub): then readable
        memory outside the modules is all that can be checked (plugin.engine)."""
        return self.static or bool(self.mappings())

    def mappings(self):
        if self._mappings is None:
            self._mappings = self._regions()
        return self._mappings

    def _regions(self):
        process = self.process
        if process is None:
            return []       # static: modules' PT_LOAD segments already say what is code
        if process.GetPluginName() == _SCRIPTED:
            return _walk_regions(process)
        regions = process.GetMemoryRegions()
        info = lldb.SBMemoryRegionInfo()
        out = []
        for i in range(regions.GetSize()):
            if not regions.GetMemoryRegionAtIndex(i, info) or not info.IsMapped():
                continue
            out.append(_mapping(info))
        return out

    # -- symbols -------------------------------------------------------------------
    def address(self, number):
        """An SBAddress for a number in this target's address space."""
        if self.static:
            return self.sbmodule.ResolveFileAddress(number)
        return self.sbtarget.ResolveLoadAddress(number)

    def number(self, sbaddress):
        """The inverse of address(): a number in this target's address space, or None."""
        value = sbaddress.GetFileAddress() if self.static else sbaddress.GetLoadAddress(self.sbtarget)
        return None if value == lldb.LLDB_INVALID_ADDRESS else value

    def symbol(self, address):
        scope = lldb.eSymbolContextFunction | lldb.eSymbolContextSymbol
        where = self.address(address)
        context = (self.sbmodule if self.static else self.sbtarget).ResolveSymbolContextForAddress(where, scope)
        for owner in (context.GetFunction(), context.GetSymbol()):
            if owner.IsValid() and not _unnamed(owner):
                start = self.number(owner.GetStartAddress())
                name = owner.GetDisplayName() or owner.GetName()
                if name and start is not None:
                    return name, start
        return None


def _unnamed(owner):
    """Is owner a symbol LLDB made up for code no symbol covers (___lldb_unnamed_symbol; in a
    stripped static program one spans all its code)? A guess, not a function's start. LLDB's
    other synthetic symbols, its PLT stubs (trampolines), keep their real names."""
    return (isinstance(owner, lldb.SBSymbol) and owner.IsSynthetic()
            and owner.GetType() != lldb.eSymbolTypeTrampoline)


def _read_core(sbtarget, process, address, size, why):
    """Read `size` bytes of a core one page at a time, each page from the core
    or, where the core leaves it out, from the module's file.

    A kernel core keeps only the first page of a file-backed read-only
    mapping (coredump_filter), so the tables of every loaded module are
    missing from it; and one read across a hole fails as a whole, though
    LLDB's own `memory read` reads the part that is there. The file serves
    only sections that are not writable (their bytes cannot have changed
    since the load); anything else missing from the core stays unreadable.
    """
    out = bytearray()
    while len(out) < size:
        here = address + len(out)
        chunk = min(size - len(out), _PAGE - here % _PAGE)
        error = lldb.SBError()
        data = process.ReadMemory(here, chunk, error)
        if not error.Success() or data is None or len(data) != chunk:
            data = _read_file_section(sbtarget, here, chunk)
        if data is None:
            raise MemoryReadError(here, size - len(out), why)
        out += data
    return bytes(out)


def _read_file_section(sbtarget, address, size):
    """Bytes at load address `address` from a read-only section of its module's file, or None."""
    out = b""
    while len(out) < size:
        here = address + len(out)
        where = sbtarget.ResolveLoadAddress(here)
        section = where.GetSection()
        if not section.IsValid() or section.GetPermissions() & lldb.ePermissionsWritable:
            return None
        load = section.GetLoadAddress(sbtarget)
        if load == lldb.LLDB_INVALID_ADDRESS or here >= load + section.GetFileByteSize():
            return None         # not in the file (zero fill past the file's bytes)
        want = min(size - len(out), load + section.GetFileByteSize() - here)
        error = lldb.SBError()
        data = section.GetSectionData(here - load, want)
        raw = data.ReadRawData(error, 0, want) if data.IsValid() and data.GetByteSize() == want else None
        if raw is None or not error.Success():
            return None
        out += bytes(raw)
    return out


def _mapping(info):
    return Mapping(info.GetRegionBase(), info.GetRegionEnd(), info.IsReadable(),
                   info.IsWritable(), info.IsExecutable(), info.GetName() or "")


def _walk_regions(process):
    """The mapped regions, asked one at a time with SBProcess.GetMemoryRegionInfo.

    For a scripted process LLDB 16's SBProcess.GetMemoryRegions is wrong: it
    steps from one region to the next with `address += base + size` (see
    scripted_process.py), so it skips regions. The walk stops where no region
    is given, where one does not advance, or after _MAX_REGIONS.
    """
    out = []
    address = 0
    for _ in range(_MAX_REGIONS):
        info = lldb.SBMemoryRegionInfo()
        if not process.GetMemoryRegionInfo(address, info).Success():
            break
        end = info.GetRegionEnd()
        if info.IsMapped():
            out.append(_mapping(info))
        if end <= address or end == lldb.LLDB_INVALID_ADDRESS:
            break
        address = end
    return out
