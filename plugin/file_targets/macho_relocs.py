"""Relocations of an object file's (MH_OBJECT) __eh_frame, applied before its CFI is decoded.

In arm64 (and x86_64) Mach-O objects an FDE's pc_begin is written as a
SUBTRACTOR/UNSIGNED relocation pair (ld64's "pointer difference": the field
becomes S(unsigned) - S(subtractor) + the addend stored in the field, where
S is an extern symbol's n_value or a section's address). Until it is applied
every pc_begin decodes to __eh_frame's own start. Facts from <mach-o/reloc.h>,
<mach-o/arm64/reloc.h>, <mach-o/x86_64/reloc.h>: relocation_info is
r_address (int32) then r_symbolnum:24, r_pcrel:1, r_length:2 (log2 bytes),
r_extern:1, r_type:4 (from the low bit); nlist_64 is strx(4) type(1) sect(1)
desc(2) value(8).
"""
from __future__ import annotations

import struct
from typing import List, Tuple

LC_SEGMENT, LC_SEGMENT_64, LC_SYMTAB = 0x1, 0x19, 0x2
# cputype -> (SUBTRACTOR, UNSIGNED) relocation types
PAIR_TYPES = {0x0100000C: (1, 0), 0x01000007: (5, 0)}


def _sections(data: bytes, is_64: bool, ncmds: int):
    """(name, addr, fileoff, reloff, nreloc) of every section, in ordinal order."""
    offset = 32 if is_64 else 28
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<2I", data, offset)
        if cmd in (LC_SEGMENT, LC_SEGMENT_64):
            wide = cmd == LC_SEGMENT_64
            nsects = struct.unpack_from("<I", data, offset + (64 if wide else 48))[0]
            first = offset + (72 if wide else 56)
            for i in range(nsects):
                at = first + i * (80 if wide else 68)
                name = data[at:at + 16].split(b"\0")[0].decode("latin-1")
                if wide:
                    addr, _size, fileoff, _align, reloff, nreloc = struct.unpack_from("<2Q4I", data, at + 32)
                else:
                    addr, _size, fileoff, _align, reloff, nreloc = struct.unpack_from("<6I", data, at + 32)
                yield name, addr, fileoff, reloff, nreloc
        offset += size


def _symbol_values(data: bytes, is_64: bool, ncmds: int) -> List[int]:
    offset = 32 if is_64 else 28
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<2I", data, offset)
        if cmd == LC_SYMTAB:
            symoff, nsyms = struct.unpack_from("<2I", data, offset + 8)
            entry = 16 if is_64 else 12
            return [struct.unpack_from("<Q" if is_64 else "<I", data, symoff + i * entry + 8)[0]
                    for i in range(nsyms)]
        offset += size
    return []


def relocate_eh_frame(data: bytes) -> Tuple[bytes, List[str]]:
    """(data with __eh_frame's relocation pairs applied, problems) of a little-endian MH_OBJECT."""
    try:
        return _relocated(data)
    except (struct.error, IndexError):
        return data, ["__eh_frame: its relocations cannot be read (FDE ranges are unrelocated)"]


def _relocated(data: bytes) -> Tuple[bytes, List[str]]:
    magic, cputype, _sub, filetype, ncmds = struct.unpack_from("<5I", data, 0)
    is_64 = magic == 0xFEEDFACF
    if filetype != 1 or magic not in (0xFEEDFACF, 0xFEEDFACE) or cputype not in PAIR_TYPES:
        return data, []
    subtractor, unsigned = PAIR_TYPES[cputype]
    sections = list(_sections(data, is_64, ncmds))
    eh = next((s for s in sections if s[0] == "__eh_frame"), None)
    if eh is None or not eh[4]:
        return data, []
    symbols = _symbol_values(data, is_64, ncmds)

    def value(symbolnum, extern):
        if extern:
            return symbols[symbolnum]
        return sections[symbolnum - 1][1]

    out, problems, pending = bytearray(data), [], None
    for i in range(eh[4]):
        address, packed = struct.unpack_from("<iI", data, eh[3] + 8 * i)
        symbolnum, length, extern, kind = packed & 0xFFFFFF, (packed >> 25) & 3, (packed >> 27) & 1, packed >> 28
        if kind == subtractor:
            pending = (address, value(symbolnum, extern))
            continue
        if kind == unsigned and pending is not None and pending[0] == address and length in (2, 3):
            fmt = "<i" if length == 2 else "<q"
            at = eh[2] + address
            field = struct.unpack_from(fmt, out, at)[0] + value(symbolnum, extern) - pending[1]
            bits = 32 if length == 2 else 64
            field = (field + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
            struct.pack_into(fmt, out, at, field)
        elif kind != unsigned or pending is not None:
            problems.append("__eh_frame relocation type %d at +0x%x not applied" % (kind, address))
        pending = None
    return bytes(out), problems
