"""What the core reads from ELF files on disk, and why.

Only what is not in the debuggee's memory: `.debug_frame` (never loaded),
section headers (to find `.eh_frame` when no `.eh_frame_hdr` points at it,
and `.symtab`), and, for debuggers that give no header address, the file's
link address and entry point. Section headers are read with pyelftools and
cached per (path, size, mtime). Tables found here say so in found_by.
"""
from __future__ import annotations

import os
import struct
from functools import lru_cache
from typing import Iterator, NamedTuple

from plugin.errors import DecodeError, bad_file_errors
from plugin.formats import compressed, elf
from plugin.modules.module import Module, ModuleFormat, TableLocation


class SectionHeader(NamedTuple):
    """One section header of a file on disk (pyelftools' names for the type)."""
    address: int        # sh_addr (a link-time address)
    size: int
    offset: int         # sh_offset in the file
    type: str           # e.g. "SHT_PROGBITS", "SHT_NOBITS"
    flags: int = 0      # sh_flags
    is64: bool = True   # the file's ELF class and byte order (for a compression header)
    little: bool = True


def _key(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sections(key):
    from elftools.elf.elffile import ELFFile
    path = key[0]
    out = {}
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            for sec in elf.iter_sections():
                out[sec.name] = SectionHeader(sec["sh_addr"], sec["sh_size"], sec["sh_offset"], sec["sh_type"],
                                              sec["sh_flags"], elf.elfclass == 64, elf.little_endian)
    except bad_file_errors() as exc:
        raise OSError("cannot read section headers of %s: %s" % (path, exc)) from None
    return out


def sections(path: str | None) -> dict[str, SectionHeader]:
    """{name: SectionHeader} of an ELF file, {} if it is not there."""
    key = _key(path) if path else None
    return _sections(key) if key else {}


def section_bytes(path: str, name: str) -> tuple[int, bytes] | None:
    """(sh_addr, bytes) of a section as stored in the file, or None."""
    info = sections(path).get(name)
    if info is None or info.type == "SHT_NOBITS":
        return None
    if info.size > os.path.getsize(path):
        raise OSError("%s: section %s is larger than the file" % (path, name))
    with open(path, "rb") as handle:
        handle.seek(info.offset)
        data = handle.read(info.size)
    if len(data) != info.size:
        raise OSError("%s: section %s is truncated" % (path, name))
    return info.address, data


def eh_frame_location(module: Module) -> TableLocation | None:
    """`.eh_frame` of an ELF module by the section headers of its file, at run-time
    addresses; for a module whose `.eh_frame_hdr` does not lead to it. None if
    the file has no such section (or is not on disk)."""
    info = sections(module.path).get(".eh_frame")
    if info is None or info.type == "SHT_NOBITS":       # a separate debug file: no bytes here
        return None
    return TableLocation(".eh_frame", info.address + module.load_bias, info.size,
                         "section headers of %s (no .eh_frame_hdr)" % module.path)


def section_size_at(module: Module, name: str, address: int) -> int | None:
    """sh_size of the module file's section `name` when it starts at run-time
    `address`; None when the file has no such section there (or cannot be read):
    then the caller keeps its own bound (the segment's end)."""
    try:
        info = sections(module.path).get(name) if module.path and module.format == ModuleFormat.ELF else None
    except OSError:
        return None
    if info is None or info.type == "SHT_NOBITS" or info.address + module.load_bias != address:
        return None
    return info.size


def debug_frame(module: Module) -> tuple[TableLocation, bytes] | None:
    """`.debug_frame` of an ELF module, read from its file: where it is (at link
    addresses: the loader never maps it) and its bytes; None if there is none."""
    if not module.path or module.format != ModuleFormat.ELF:
        return None
    how = "file on disk: %s" % module.path
    found = section_bytes(module.path, ".debug_frame")
    if found is not None:
        address, data = found
        info = sections(module.path)[".debug_frame"]
        if info.flags & compressed.SHF_COMPRESSED:
            data, method = compressed.shf_compressed(".debug_frame", data, info.is64, info.little)
            how += " (SHF_COMPRESSED, %s)" % method
    else:
        found = section_bytes(module.path, ".zdebug_frame")
        if found is None:
            return None
        address, data = found
        data = compressed.gnu_zdebug(".zdebug_frame", data)
        how += " (.zdebug_frame, zlib)"
    return TableLocation(".debug_frame", address, len(data), how, in_memory=False), data


def link_layout(path: str) -> tuple[int, int]:
    """(link address of the ELF header, e_entry) of an ELF file, from its program
    headers (plugin.formats.elf.header_link_address). OSError if it cannot be read."""
    with open(path, "rb") as handle:
        try:
            header = elf.parse_header(handle.read(elf.HEADER_SIZE))
            handle.seek(header.phoff)
            phdrs = elf.parse_program_headers(handle.read(header.phentsize * header.phnum), header)
            loads = [p for p in phdrs if p.type == elf.PT_LOAD]
            return elf.header_link_address(loads), header.entry
        except (DecodeError, struct.error) as exc:      # not ELF, or cut short
            raise OSError("%s: %s" % (path, exc)) from None


def function_symbols(elf) -> Iterator:
    """The defined function symbols (STT_FUNC, non-zero value) of a pyelftools ELFFile, read
    lazily: those of .symtab, or those of .dynsym when .symtab has none (or is stripped).
    A damaged table raises what pyelftools raises (plugin.errors.bad_file_errors): the
    file targets read it under plugin.errors.guard (LaidOutFile.symbol)."""
    from elftools.elf.sections import SymbolTableSection
    for name in (".symtab", ".dynsym"):
        table = elf.get_section_by_name(name)
        if not isinstance(table, SymbolTableSection):   # absent, or its type damaged: no symbols there
            continue
        found = False
        for symbol in table.iter_symbols():
            if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_value"]:
                found = True
                yield symbol
        if found:
            return


@lru_cache(maxsize=64)
def _functions_named(key, names):
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    found = []
    try:
        with open(key[0], "rb") as handle:
            for section in ELFFile(handle).iter_sections():
                if not isinstance(section, SymbolTableSection):
                    continue
                for symbol in section.iter_symbols():
                    if symbol.name in names and symbol["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") \
                            and symbol["st_value"]:
                        found.append((symbol["st_value"], symbol["st_value"] + max(symbol["st_size"], 1),
                                      symbol.name))
    except bad_file_errors():
        return ()
    return tuple(sorted(set(found)))


def functions_named(module: Module, names: tuple) -> tuple:
    """((start, end, name), ...) at run-time addresses of the functions called one of
    `names` in the module's file (.symtab and .dynsym); () when it is not on disk.

    For debuggers that cannot look up symbols everywhere (GDB's unwinder sees
    only symbols with debug information)."""
    key = _key(module.path) if module.path and module.format == ModuleFormat.ELF else None
    if key is None:
        return ()
    return tuple((start + module.load_bias, end + module.load_bias, name)
                 for start, end, name in _functions_named(key, tuple(sorted(names))))
