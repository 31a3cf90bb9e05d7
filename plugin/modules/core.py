"""A core file's own mapping list, and the files it names, for a debugger that has no objfile for them.

An ELF core describes the process's memory as PT_LOAD segments (address,
size, permissions; a file-backed segment the process never wrote is
usually left out, or kept with no bytes) and names the files behind its
mappings in its NT_FILE note (start, end, offset in the file). `read_core`
gives those mappings, each named after its file, so a debugger opened on a
core without the executable (`gdb -c core`) still knows every module; and
`CoreFiles` reads the memory the core left out from the named file, once
that file is shown to be the one the process mapped: the GNU build id of
the file on disk must be in the core's own copy of the file's first page,
at the same place.
"""
from __future__ import annotations

import os
import struct
from typing import Dict, List, NamedTuple, Optional

from plugin.target import Mapping

ET_CORE, PT_LOAD, PT_NOTE = 4, 1, 4
NT_PRSTATUS, NT_FILE, NT_GNU_BUILD_ID = 1, 0x46494C45, 3
PF_X, PF_W, PF_R = 1, 2, 4
PRSTATUS_PID = 32           # pr_pid's offset in a 64-bit Linux prstatus (after siginfo, cursig, sigpend, sighold)
HEADER_PAGE = 4096          # the part of a file whose copy in the core holds its build id note
MAX_NOTES = 1 << 24         # bytes of notes read from a core


class Core(NamedTuple):
    path: str
    pid: Optional[int]
    mappings: List[Mapping]     # the PT_LOAD segments and NT_FILE entries, named, in address order


def read_core(path: str) -> Optional[Core]:
    """The mappings of a 64-bit little-endian ELF core, or None if path is none (or unreadable)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            if len(header) < 64 or header[:6] != b"\x7fELF\x02\x01" or _u16(header, 16) != ET_CORE:
                return None
            phoff, phentsize, phnum = _u64(header, 32), _u16(header, 54), _u16(header, 56)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
            loads, files, pid = [], [], None
            for i in range(phnum):
                kind, flags, offset, vaddr, _, filesz, memsz = struct.unpack_from("<IIQQQQQ", table, i * phentsize)
                if kind == PT_LOAD:
                    loads.append((vaddr, vaddr + memsz, flags))
                elif kind == PT_NOTE and 0 < filesz <= MAX_NOTES:
                    handle.seek(offset)
                    found_pid, found_files = _notes(handle.read(filesz))
                    pid = pid if pid is not None else found_pid
                    files += found_files
    except (OSError, struct.error, ValueError):
        return None
    return Core(path, pid, _named(loads, files))


def _notes(data):
    pid, files, at = None, [], 0
    while at + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from("<III", data, at)
        desc = at + 12 + _align4(namesz)
        body = data[desc:desc + descsz]
        if kind == NT_PRSTATUS and pid is None and len(body) >= PRSTATUS_PID + 4:
            pid = struct.unpack_from("<i", body, PRSTATUS_PID)[0]
        elif kind == NT_FILE:
            files = _file_note(body)
        at = desc + _align4(descsz)
    return pid, files


def _file_note(body):
    """[(start, end, offset in the file, path)] of an NT_FILE note."""
    count, page = struct.unpack_from("<QQ", body, 0)
    entries = [struct.unpack_from("<QQQ", body, 16 + 24 * i) for i in range(count)]
    names = body[16 + 24 * count:].split(b"\0")
    return [(start, end, pages * page, os.fsdecode(names[i])) for i, (start, end, pages) in enumerate(entries)
            if i < len(names)]


def _named(loads, files):
    """PT_LOAD segments with the name and offset of the file mapped there; named mappings the core
    has no segment for are listed too (readable, not executable: their permissions are unknown)."""
    out, covered = [], set()
    for start, end, flags in loads:
        entry = next((f for f in files if f[0] <= start < f[1]), None)
        name, offset = ("", 0) if entry is None else (entry[3], entry[2] + start - entry[0])
        out.append(Mapping(start, end, bool(flags & PF_R), bool(flags & PF_W), bool(flags & PF_X), name, offset))
        covered.add(start)
    for start, end, offset, name in files:
        if start not in covered and not any(m.start <= start < m.end for m in out):
            out.append(Mapping(start, end, True, False, False, name, offset))
    return sorted(out, key=lambda m: m.start)


def core_of(pid: int, fd_directory: str = "/proc/self/fd") -> Optional[Core]:
    """The core file this process (the debugger) has open whose process was pid, or None: the
    debugger's API does not name its core file, but the debugger keeps it open."""
    try:
        names = os.listdir(fd_directory)
    except OSError:
        return None
    for name in names:
        try:
            path = os.readlink(os.path.join(fd_directory, name))
        except OSError:
            continue
        if path.startswith("/") and os.path.isfile(path):
            core = read_core(path)
            if core is not None and core.pid == pid:
                return core
    return None


class CoreFiles:
    """Memory a core left out, read from the file mapped there once its build id is checked."""

    def __init__(self, core: Core, read_core_memory):
        self.core = core
        self._read = read_core_memory       # (address, size) -> bytes from the core, raises when absent
        self._verdicts: Dict[str, bool] = {}    # path -> is it the file the process mapped?
        self.problems: List[str] = []

    def read(self, address: int, size: int) -> Optional[bytes]:
        """size bytes at address from the file mapped there, or None (no file, not the same file,
        or past its end)."""
        for mapping in self.core.mappings:
            if mapping.name.startswith("/") and mapping.start <= address and address + size <= mapping.end:
                if not self._same_file(mapping.name):
                    return None
                try:
                    with open(mapping.name, "rb") as handle:
                        handle.seek(mapping.offset + address - mapping.start)
                        data = handle.read(size)
                except OSError:
                    return None
                return data if len(data) == size else None
        return None

    def _same_file(self, path: str) -> bool:
        known = self._verdicts.get(path)
        if known is None:
            known = self._verdicts[path] = self._check(path)
        return known

    def _check(self, path: str) -> bool:
        first = next((m for m in self.core.mappings if m.name == path and m.offset == 0), None)
        try:
            with open(path, "rb") as handle:
                page = handle.read(HEADER_PAGE)
        except OSError as exc:
            self.problems.append("%s: %s" % (path, exc))
            return False
        build_id = _build_id_note(page)
        if first is None or build_id is None:
            self.problems.append("%s: no build id to check against the core's copy of its first page" % path)
            return False
        at, note = build_id
        try:
            copy = bytes(self._read(first.start + at, len(note)))
        except Exception:           # the core has no copy of the first page
            copy = None
        if copy != note:
            self.problems.append("%s: its build id is not the one the core's copy of its first page has" % path)
            return False
        return True


def _build_id_note(page: bytes):
    """(offset, bytes) of the GNU build id note in a 64-bit little-endian ELF file's first page, or None."""
    if page[:6] != b"\x7fELF\x02\x01":
        return None
    phoff, phentsize, phnum = _u64(page, 32), _u16(page, 54), _u16(page, 56)
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + 56 > len(page):
            return None
        kind, _, offset, _, _, filesz, _ = struct.unpack_from("<IIQQQQQ", page, at)
        if kind != PT_NOTE or offset + filesz > len(page):
            continue
        note = offset
        while note + 12 <= offset + filesz:
            namesz, descsz, note_kind = struct.unpack_from("<III", page, note)
            end = note + 12 + _align4(namesz) + _align4(descsz)
            if note_kind == NT_GNU_BUILD_ID and page[note + 12:note + 12 + namesz].rstrip(b"\0") == b"GNU":
                return note, page[note:note + 12 + _align4(namesz) + descsz]
            note = end
    return None


def _align4(n):
    return (n + 3) & ~3


def _u16(data, at):
    return struct.unpack_from("<H", data, at)[0]


def _u64(data, at):
    return struct.unpack_from("<Q", data, at)[0]
