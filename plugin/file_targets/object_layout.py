"""A relocatable object (ET_REL, a `.o`) laid out as a linker would place its sections.

An object's allocated sections all have address 0, and its CFI says where
each function starts only through relocations (an FDE's pc_begin is
relocated against `.text`, or against `.text.NAME` with
-ffunction-sections). To check an object's tables against its code (`python -m
plugin validate x.o`), its allocated sections are placed one after the other,
in section order, each at its alignment, and `.eh_frame` and `.debug_frame`
are relocated for that placement: S + A for an absolute field, S + A - P for
a pc-relative one, where S is the symbol's address in the layout (its
section's place plus its value), A the addend (REL: the field's own
contents) and P the field's address. Only the relocation types CFI uses are
known; a field of another type is left as stored and counted in `problems`.
The offline dump (`tables x.o`) shows an object's FDEs against their
sections instead (object_file.py).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from elftools.elf.relocation import RelocationSection

SHF_ALLOC = 0x2
CFI_SECTIONS = (".eh_frame", ".debug_frame")
# machine -> {relocation type: (field size, pc-relative)}: the types CFI's fields are relocated with
RELOCATION_TYPES = {
    "x86_64": {1: (8, False), 2: (4, True), 10: (4, False), 11: (4, False), 24: (8, True)},
    "i386": {1: (4, False), 2: (4, True)},
    "aarch64": {257: (8, False), 258: (4, False), 260: (8, True), 261: (4, True)},
    "arm": {2: (4, False), 3: (4, True)},
}


def section_bases(elf) -> Dict[int, int]:
    """{section index: address} of the object's allocated sections, placed in order, aligned."""
    bases, cursor = {}, 0
    for index, section in enumerate(elf.iter_sections()):
        if section["sh_flags"] & SHF_ALLOC and section["sh_size"] and section["sh_type"] != "SHT_NOBITS":
            align = max(1, section["sh_addralign"])
            cursor = (cursor + align - 1) // align * align
            bases[index] = cursor
            cursor += section["sh_size"]
    return bases


def relocated_cfi(elf, arch, bases: Dict[int, int], problems: List[str]) -> Dict[str, Tuple[int, bytes, str]]:
    """{".eh_frame"/".debug_frame": (address, relocated bytes, how found)} for the layout `bases`."""
    out = {}
    types = RELOCATION_TYPES.get(arch.name, {})
    for index, section in enumerate(elf.iter_sections()):
        if section.name not in CFI_SECTIONS or section["sh_type"] == "SHT_NOBITS":
            continue
        data = bytearray(section.data())
        skipped = 0
        for relocations in elf.iter_sections():
            if not isinstance(relocations, RelocationSection) or relocations["sh_info"] != index:
                continue
            skipped += _apply(elf, relocations, data, bases, bases.get(index, 0), types, arch.byteorder)
        if skipped:
            problems.append("%s: %d relocations of types CFI does not use were not applied" % (section.name, skipped))
        out[section.name] = (bases.get(index, 0), bytes(data),
                             "%s of the object, relocated for its sections laid out in order" % section.name)
    return out


def _apply(elf, relocations, data: bytearray, bases, place: int, types, byteorder: str) -> int:
    """Apply one relocation section to data (a section placed at `place`); how many were skipped."""
    symbols = elf.get_section(relocations["sh_link"])
    skipped = 0
    for relocation in relocations.iter_relocations():
        kind = types.get(relocation["r_info_type"])
        offset = relocation["r_offset"]
        if kind is None or offset + kind[0] > len(data):
            skipped += 1
            continue
        size, pc_relative = kind
        stored = int.from_bytes(data[offset:offset + size], byteorder, signed=True)
        addend = relocation["r_addend"] if relocations.is_RELA() else stored
        symbol = symbols.get_symbol(relocation["r_info_sym"])
        index = symbol["st_shndx"]
        value = (bases.get(index, 0) if isinstance(index, int) else 0) + symbol["st_value"] + addend
        if pc_relative:
            value -= place + offset
        data[offset:offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, byteorder)
    return skipped
