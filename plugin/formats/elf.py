"""ELF file and program headers, and the GNU build-id note, decoded from bytes.

Pure decoding: the callers read the bytes (from the debuggee's memory in
plugin/modules/elf.py, from a file in plugin/file_targets/elf.py and
plugin/modules/on_disk.py). References: the System V gABI ("ELF Header",
"Program Header", "Note Section"), the LSB (PT_GNU_EH_FRAME), binutils
(PT_GNU_SFRAME) and the ARM ELF ABI (PT_ARM_EXIDX).
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from plugin.errors import DecodeError, DecodeKind

ELF_MAGIC = b"\x7fELF"
PT_LOAD = 1
PT_NOTE = 4
PT_GNU_EH_FRAME = 0x6474E550
PT_GNU_SFRAME = 0x6474E554
PT_ARM_EXIDX = 0x70000001
PF_X = 1
NT_GNU_BUILD_ID = 3
HEADER_SIZE = 64            # enough for both ELF32 (52 bytes) and ELF64 headers


@dataclass(frozen=True)
class ElfHeader:
    """What the rest of the plugin needs from the ELF file header."""
    is_64: bool
    order: str              # struct byte order: "<" or ">"
    machine: int            # e_machine
    entry: int              # e_entry
    phoff: int
    phentsize: int
    phnum: int


@dataclass(frozen=True)
class ProgramHeader:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int

    @property
    def executable(self) -> bool:
        return bool(self.flags & PF_X)


def parse_header(head: bytes) -> ElfHeader:
    """The ELF header from the first HEADER_SIZE bytes of an image."""
    if head[:4] != ELF_MAGIC:
        raise DecodeError("ELF header", 0, "no ELF magic", DecodeKind.MALFORMED)
    is64 = head[4] == 2
    order = "<" if head[5] == 1 else ">"
    machine = struct.unpack_from(order + "H", head, 18)[0]
    if is64:
        entry, phoff = struct.unpack_from(order + "QQ", head, 24)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
    else:
        entry, phoff = struct.unpack_from(order + "II", head, 24)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
    return ElfHeader(is64, order, machine, entry, phoff, phentsize, phnum)


def parse_program_headers(data: bytes, header: ElfHeader) -> list[ProgramHeader]:
    """header.phnum program headers from `data`, which starts at e_phoff."""
    fmt = header.order + ("IIQQQQQQ" if header.is_64 else "IIIIIIII")
    size = struct.calcsize(fmt)
    if header.phentsize < size:
        raise DecodeError("program headers", 0, "entry size %d is too small" % header.phentsize, DecodeKind.MALFORMED)
    out = []
    for i in range(header.phnum):
        fields = struct.unpack_from(fmt, data, i * header.phentsize)
        if header.is_64:
            p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = fields
        else:
            p_type, p_offset, p_vaddr, _, p_filesz, p_memsz, p_flags, _ = fields
        out.append(ProgramHeader(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
    return out


def header_link_address(loads: Sequence[ProgramHeader]) -> int:
    """The link-time address of the ELF header: where the lowest PT_LOAD that
    maps file offset 0 puts it; in a file whose segments map no header (a
    core file), the lowest PT_LOAD's address.

    A module's load bias is its run-time header address minus this. The one
    place the plugin computes an ELF link address (module discovery, the
    file-backed target and GDB's remote module list all ask here).
    """
    if not loads:
        raise DecodeError("program headers", 0, "no PT_LOAD segment", DecodeKind.ABSENT)
    at_zero = [p.vaddr for p in loads if p.offset == 0]
    return min(at_zero) if at_zero else min(p.vaddr for p in loads)


def build_id(notes: bytes, order: str) -> str | None:
    """The NT_GNU_BUILD_ID of a PT_NOTE segment's bytes, as hex, or None."""
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from(order + "III", notes, pos)
        name_end = pos + 12 + ((namesz + 3) & ~3)
        desc_end = name_end + ((descsz + 3) & ~3)
        if desc_end > len(notes):
            return None
        if kind == NT_GNU_BUILD_ID and notes[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
            return notes[name_end:name_end + descsz].hex()
        pos = desc_end
    return None
