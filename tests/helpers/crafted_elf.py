"""Hostile variants of a real ELF64 little-endian file, made by patching fields
in place (for the offline command's bounds tests and the fuzzer's seeds).

Each function takes the file's bytes and returns new bytes; offsets are the
ELF64 gABI's (e_shoff at 0x28, e_phoff at 0x20, a program header's p_memsz
at +0x28 and p_filesz at +0x20).
"""

import io
import struct

from elftools.elf.elffile import ELFFile

PT_LOAD = 1


def _u64(data, offset, value):
    out = bytearray(data)
    struct.pack_into("<Q", out, offset, value)
    return bytes(out)


def program_headers(data):
    """[(file offset of the header, p_type)]"""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    entsize, count = struct.unpack_from("<HH", data, 0x36)
    return [(phoff + i * entsize, struct.unpack_from("<I", data, phoff + i * entsize)[0])
            for i in range(count)]


def huge_last_load_memsz(data, memsz=4 << 30):
    """The last PT_LOAD's p_memsz set to `memsz` (a zero fill of 4 GiB by default)."""
    last = [off for off, kind in program_headers(data) if kind == PT_LOAD][-1]
    return _u64(data, last + 0x28, memsz)


def section_header_offset(data, value=1 << 63):
    """e_shoff set to `value`."""
    return _u64(data, 0x28, value)


def section_offset(data, name):
    sec = ELFFile(io.BytesIO(data)).get_section_by_name(name)
    return sec["sh_offset"], sec["sh_size"]


def huge_first_fde_length(data, length=1 << 30):
    """The first FDE of .eh_frame (after its first CIE) given a length of `length`."""
    start, _ = section_offset(data, ".eh_frame")
    cie_length, = struct.unpack_from("<I", data, start)
    out = bytearray(data)
    struct.pack_into("<I", out, start + 4 + cie_length, length)
    return bytes(out)


PT_GNU_SFRAME = 0x6474E554


def huge_sframe(data, count=0xFFFFFFFF, size=4 << 30):
    """.sframe's num_fdes set to `count` and PT_GNU_SFRAME's p_filesz and
    p_memsz to `size`, so the header's counts fit the size it claims."""
    start, _ = section_offset(data, ".sframe")
    out = bytearray(data)
    struct.pack_into("<I", out, start + 8, count)
    for header, kind in program_headers(data):
        if kind == PT_GNU_SFRAME:
            struct.pack_into("<QQ", out, header + 0x20, size, size)
    return bytes(out)
