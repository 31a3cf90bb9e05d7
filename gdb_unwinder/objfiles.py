"""GDB's loaded objfiles as modules, and which of them GDB unwinds itself.

`module_refs` locates each objfile's ELF header in the debuggee without
running a GDB command, so the unwinder may call it: an executable (ET_EXEC)
sits where its program headers say; the vdso's address is in the name GDB
gives it ("system-supplied DSO at 0x..."); a position-independent file is
placed by one of its functions, whose runtime address GDB's symbol tables
give (a file without debug information cannot be placed this way).
`refs_from_commands` adds what `info sharedlibrary` and `info files` tell,
for use outside the unwinder only.
"""
from __future__ import annotations

import itertools
import os
import re
from typing import List, Optional, Set, Tuple

import gdb

from plugin.errors import MemoryReadError
from plugin.modules import link_map, on_disk
from plugin.target import ModuleRef

VDSO_NAME = re.compile(r"system-supplied DSO at (0x[0-9a-fA-F]+)")
ET_EXEC = "ET_EXEC"
SYMBOL_TRIES = 40       # function names tried per file before giving up on placing it


def _objfiles(progspace) -> list:
    try:
        return list(progspace.objfiles()) if progspace is not None else list(gdb.objfiles())
    except (gdb.error, RuntimeError):
        return []


REMOTE_PREFIX = "target:"     # GDB's name for a file it reads through the remote target


def local_path(filename) -> Optional[str]:
    """The file on this machine for an objfile name ("target:/lib/..." when the sysroot is the
    remote target's, which for a local gdbserver is this file system), or None."""
    if not filename:
        return None
    if filename.startswith(REMOTE_PREFIX):
        filename = filename[len(REMOTE_PREFIX):]
    return filename if os.path.isfile(filename) else None


def vdso_address(objfile) -> Optional[int]:
    match = VDSO_NAME.match(objfile.filename or "")
    return int(match.group(1), 16) if match else None


def loaded(progspace) -> Tuple[Set[str], Set[int]]:
    """(real paths of the files GDB loaded, header addresses of in-memory objfiles such as the vdso)."""
    paths, in_memory = set(), set()
    for objfile in _objfiles(progspace):
        if not objfile.is_valid():
            continue
        address = vdso_address(objfile)
        if address is not None:
            in_memory.add(address)
        elif local_path(objfile.filename):
            paths.add(os.path.realpath(local_path(objfile.filename)))
    return paths, in_memory


def _layout(path):
    """(ELF type, lowest PT_LOAD vaddr - offset, [(name, value) of defined functions]) of a file."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        kind = elf["e_type"]
        named = ((symbol.name, symbol["st_value"]) for symbol in on_disk.function_symbols(elf) if symbol.name)
        functions = list(itertools.islice(named, SYMBOL_TRIES))
    return kind, on_disk.link_layout(path)[0], functions


def _code_address(link_value: int, runtime: int) -> int:
    """A symbol's or entry point's link value as GDB reports its runtime address: Arm
    Thumb code has bit 0 set in the ELF file, and GDB drops it."""
    return link_value & ~1 if link_value & 1 and not runtime & 1 else link_value


def _runtime_address(objfiles, name) -> Optional[int]:
    for objfile in objfiles:
        for lookup in (objfile.lookup_global_symbol, objfile.lookup_static_symbol):
            try:
                symbol = lookup(name)
                if symbol is not None and symbol.addr_class == gdb.SYMBOL_LOC_BLOCK:
                    return int(symbol.value().address)
            except (gdb.error, RuntimeError, ValueError):
                continue
    return None


def symbol_files(progspace) -> List[str]:
    """The local files of GDB's objfiles (separate debug files included), without a GDB command."""
    paths = []
    for objfile in _objfiles(progspace):
        path = local_path(objfile.filename) if objfile.is_valid() else None
        if path is not None and path not in paths:
            paths.append(path)
    return paths


def module_refs(progspace) -> List[ModuleRef]:
    """ModuleRefs of the objfiles GDB loaded, each placed without a GDB command (or left out)."""
    objfiles = [o for o in _objfiles(progspace) if o.is_valid()]
    debug_files = {}
    for objfile in objfiles:
        if objfile.owner is not None:
            debug_files.setdefault(objfile.owner.filename, []).append(objfile)
    refs = []
    for objfile in objfiles:
        if objfile.owner is not None:
            continue
        address = vdso_address(objfile)
        if address is not None:
            refs.append(ModuleRef("[vdso]", address, None))
            continue
        path = local_path(objfile.filename)
        if path is None:
            continue
        try:
            kind, low, functions = _layout(path)
        except (OSError, ValueError, Exception):     # pyelftools raises its own errors on bad files
            continue
        if kind == ET_EXEC:
            refs.append(ModuleRef(os.path.basename(path), low, path))
            continue
        separate = debug_files.get(objfile.filename, [])
        searched = [objfile] + separate
        if not functions:
            for debug in separate:
                try:
                    functions = _layout(debug.filename)[2]
                except Exception:
                    functions = []
                if functions:
                    break
        for name, value in functions:
            runtime = _runtime_address(searched, name)
            if runtime is not None:
                refs.append(ModuleRef(os.path.basename(path), runtime - _code_address(value, runtime) + low, path))
                break
    return refs


def link_map_refs(progspace, refs: List[ModuleRef], read_memory) -> List[ModuleRef]:
    """GDB's objfiles that module_refs could not place (a library without debug information), placed
    by the loader's list in memory (plugin.modules.link_map): no GDB command, so the unwinder may ask
    on a remote stub without a mapping list (qemu-user)."""
    exe = local_path(progspace.filename) if progspace is not None else None
    main = next((ref for ref in refs if ref.path is not None and ref.path == exe), None)
    if main is None:
        return []
    files = {}
    for objfile in _objfiles(progspace):
        path = local_path(objfile.filename) if objfile.is_valid() and objfile.owner is None else None
        if path is not None:
            files.setdefault(os.path.basename(path), path)
    placed = {ref.path for ref in refs} | {ref.header_address for ref in refs}
    found = []
    for name, bias in link_map.loaded_objects(read_memory, main.header_address):
        path = files.get(os.path.basename(name))
        if path is None or path in placed:
            continue
        try:
            header = bias + _lowest_load(path)[0]
            if header in placed or read_memory(header, 4) != b"\x7fELF":
                continue
        except (OSError, ValueError, MemoryReadError):
            continue
        placed.add(header)
        found.append(ModuleRef(os.path.basename(path), header, path))
    return found


def refs_from_commands() -> List[ModuleRef]:
    """Header addresses from `info sharedlibrary` and `info files`: never from inside the unwinder."""
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


def _lowest_load(path):
    return on_disk.link_layout(path)


def _header_from_section(path, name, runtime_address):
    info = on_disk.sections(path).get(name)
    if info is None:
        return None
    try:
        low, _ = _lowest_load(path)
    except (OSError, ValueError):
        return None
    return runtime_address - info.address + low


def _header_from_entry(path, runtime_entry):
    try:
        low, entry = _lowest_load(path)
    except (OSError, ValueError):
        return None
    return runtime_entry - _code_address(entry, runtime_entry) + low
