"""A symbol file made from the Linux kernel's /proc/kallsyms, for GDB (`symbol-file FILE`).

A distribution's kernel package has no symbols (its System.map is a stub,
the vmlinux in the bzImage has no .symtab); /proc/kallsyms read as root has
every symbol at its running address, KASLR's slide already applied. This
writes them as an ELF64 x86-64 ET_EXEC file with one SHT_NOBITS section
over the kernel's addresses and a .symtab: text symbols (t, T) as functions,
the others as objects, lower-case types local, each sized to the next symbol.
GDB names frames from it, and plugin.modules.kernel finds the kernel's ORC
tables from its __start_orc_unwind_ip and friends. Its entry point is
startup_64's address (else the lowest symbol's), never 0: GDB ends a
backtrace silently at a frame whose function is the entry point's
("backtrace past-entry" off), and a pc in no function (a dynamic ftrace
trampoline) has function 0.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Iterable, List, NamedTuple

KERNEL_SPACE = 0xFFFF800000000000
LINE = re.compile(r"^([0-9a-fA-F]{8,16}) ([A-Za-z]) (\S+)(?:\s+\[(\S+)\])?\s*$")
STT_OBJECT, STT_FUNC, STB_LOCAL, STB_GLOBAL = 1, 2, 0, 1
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS = 1, 2, 3, 8
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
ENTRY = "startup_64"        # the kernel's entry (arch/x86/kernel/head_64.S)


class KernelSymbol(NamedTuple):
    address: int
    kind: str           # kallsyms' type letter
    name: str


def parse(lines: Iterable[str]) -> List[KernelSymbol]:
    """The kernel-space symbols of /proc/kallsyms lines (modules' too, "[name]" dropped), by address.
    Lines of another shape (and a non-root read's zero addresses) are left out."""
    out = []
    for line in lines:
        match = LINE.match(line.strip())
        if match and int(match.group(1), 16) >= KERNEL_SPACE:
            out.append(KernelSymbol(int(match.group(1), 16), match.group(2), match.group(3)))
    out.sort(key=lambda s: s.address)
    return out


def elf_bytes(symbols: List[KernelSymbol]) -> bytes:
    """The ELF file for symbols (sorted by address); ValueError when there are none."""
    if not symbols:
        raise ValueError("no kernel-space symbols (read /proc/kallsyms as root: others see zero addresses)")
    low, high = symbols[0].address, symbols[-1].address + 1
    names = bytearray(b"\0")
    local, other = [], []
    for i, symbol in enumerate(symbols):
        following = next((s.address for s in symbols[i + 1:i + 64] if s.address > symbol.address), high)
        kind = STT_FUNC if symbol.kind in "tT" else STT_OBJECT
        bind = STB_LOCAL if symbol.kind.islower() else STB_GLOBAL
        entry = (len(names), (bind << 4) | kind, 0, 1, symbol.address, following - symbol.address)
        names += symbol.name.encode() + b"\0"
        (local if bind == STB_LOCAL else other).append(entry)
    symtab = bytes(24) + b"".join(struct.pack("<IBBHQQ", *e) for e in local + other)
    section_names = b"\0.kernel\0.symtab\0.strtab\0.shstrtab\0"
    body = [symtab, bytes(names), section_names]
    offsets, at = [], 64
    for blob in body:
        offsets.append(at)
        at += len(blob) + (-len(blob)) % 8
    shoff = at
    headers = [bytes(64),
               _section(1, SHT_NOBITS, SHF_ALLOC | SHF_EXECINSTR | SHF_WRITE, low, 64, high - low, 0, 0, 4096, 0),
               _section(9, SHT_SYMTAB, 0, 0, offsets[0], len(symtab), 3, 1 + len(local), 8, 24),
               _section(17, SHT_STRTAB, 0, 0, offsets[1], len(names), 0, 0, 1, 0),
               _section(25, SHT_STRTAB, 0, 0, offsets[2], len(section_names), 0, 0, 1, 0)]
    entry = next((s.address for s in symbols if s.name == ENTRY), low)
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, entry, 0, shoff, 0, 64, 56, 0, 64, len(headers), 4)
    out = bytearray(header)
    for blob in body:
        out += blob + bytes((-len(blob)) % 8)
    return bytes(out) + b"".join(headers)


def _section(name, kind, flags, address, offset, size, link, info, align, entsize):
    return struct.pack("<IIQQQQIIQQ", name, kind, flags, address, offset, size, link, info, align, entsize)


def write(kallsyms_path: str, out_path: str) -> int:
    """Write the symbol file for a copy of /proc/kallsyms; the number of symbols written.
    ValueError for a path that is no regular file (a fifo or a device could never end)."""
    if os.path.exists(kallsyms_path) and not os.path.isfile(kallsyms_path):
        raise ValueError("not a regular file (copy /proc/kallsyms to a file first)")
    with open(kallsyms_path, errors="replace") as handle:
        symbols = parse(handle)
    data = elf_bytes(symbols)
    with open(out_path, "wb") as handle:
        handle.write(data)
    return len(symbols)
