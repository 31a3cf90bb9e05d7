"""The dynamic loader's list of loaded objects, read from the debuggee's memory.

Where no mapping list can be had (QEMU's user-mode gdbstub, a remote stub without
/proc) and no debugger command may run (inside the debugger's unwinder), a shared
library without debug information cannot be placed from the debugger's symbols. The
loader's own list places it with memory reads only: the executable's PT_DYNAMIC has a
DT_DEBUG entry the loader fills with the address of its `struct r_debug`, whose r_map
starts the chain of `struct link_map` (l_addr, l_name, l_ld, l_next, l_prev), one per
object: its load bias and the name it was opened by (glibc's link.h; the System V
gABI's "Dynamic Section" for DT_DEBUG).
"""
from __future__ import annotations

import struct
from typing import List, NamedTuple

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import elf

PT_DYNAMIC = 2
DT_NULL, DT_DEBUG = 0, 21
MAX_DYNAMIC = 512       # entries of PT_DYNAMIC read at most
MAX_OBJECTS = 1024      # link_map entries followed at most (a loop ends sooner: each is seen once)
MAX_NAME = 4096


class Loaded(NamedTuple):
    """One object of the loader's list: the name it was opened by, and its load bias (l_addr)."""
    name: str
    bias: int


def loaded_objects(read_memory, executable_header: int) -> List[Loaded]:
    """The objects on the loader's list of the executable whose ELF header is at executable_header
    (read_memory(address, size) -> bytes, raising MemoryReadError), in the loader's order (the
    executable itself, which has no name there, left out); [] where the list cannot be read (a
    static program, before the loader filled DT_DEBUG, unreadable memory, a malformed header)."""
    try:
        return _loaded(read_memory, executable_header)
    except (MemoryReadError, DecodeError, struct.error):
        return []


def _loaded(read_memory, executable_header: int) -> List[Loaded]:
    header = elf.parse_header(read_memory(executable_header, elf.HEADER_SIZE))
    if not 0 < header.phnum <= MAX_DYNAMIC:
        return []
    phdrs = elf.parse_program_headers(read_memory(executable_header + header.phoff,
                                                  header.phentsize * header.phnum), header)
    loads = [p for p in phdrs if p.type == elf.PT_LOAD]
    dynamic = next((p for p in phdrs if p.type == PT_DYNAMIC), None)
    if dynamic is None or not loads:
        return []
    bias = executable_header - elf.header_link_address(loads)
    word = 8 if header.is_64 else 4
    pointer = header.order + ("Q" if header.is_64 else "I")
    count = min(dynamic.memsz // (2 * word), MAX_DYNAMIC)
    entries = read_memory(bias + dynamic.vaddr, count * 2 * word)
    r_debug = 0
    for i in range(count):
        tag, value = struct.unpack_from(header.order + ("qQ" if header.is_64 else "iI"), entries, i * 2 * word)
        if tag == DT_NULL:
            break
        if tag == DT_DEBUG:
            r_debug = value
    if r_debug == 0:
        return []
    # struct r_debug: int r_version, then (aligned to a pointer) struct link_map *r_map
    (entry,) = struct.unpack(pointer, read_memory(r_debug + word, word))
    found, seen = [], set()
    while entry and entry not in seen and len(seen) < MAX_OBJECTS:
        seen.add(entry)
        l_addr, l_name, _, l_next = struct.unpack(header.order + (pointer[1:] * 4), read_memory(entry, 4 * word))
        name = _string(read_memory, l_name) if l_name else ""
        if name:
            found.append(Loaded(name, l_addr))
        entry = l_next
    return found


def _string(read_memory, address: int) -> str:
    data = b""
    while len(data) < MAX_NAME:
        try:
            chunk = read_memory(address + len(data), 64)
        except MemoryReadError:
            chunk = read_memory(address + len(data), 1)     # the name may end just before an unmapped page
        end = chunk.find(b"\0")
        if end >= 0:
            return (data + chunk[:end]).decode("utf-8", "replace")
        data += chunk
    return ""

