"""CFI of a relocatable object (ET_REL: crt1.o, any .o) for the offline dump.

Every section of an object sits at address 0 and an FDE's pc_begin is a
relocation still to be applied, so `.eh_frame` and `.debug_frame` are read
from the file, their relocations applied (pyelftools' RelocationHandler,
with every symbol at its offset in its own section), and decoded with the
section at address 0: an FDE's range is then an offset into the section its
pc_begin relocation names, and is shown against that section
("[.text+0x0, .text+0x26)"). Other tables of an object (.sframe,
.ARM.exidx) are not decoded; the dump says so.
"""
from __future__ import annotations

import io
import struct
from typing import NamedTuple

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.construct import ConstructError
from elftools.elf.relocation import RelocationHandler

from plugin.formats import cfi
from plugin.memory import Region

CFI_SECTIONS = (".eh_frame", ".debug_frame")
# What pyelftools raises on a damaged object (its relocation handler asserts
# that sh_link names a symbol table).
PYELFTOOLS_ERRORS = (ELFError, ELFParseError, ConstructError, ValueError, KeyError, AssertionError,
                     OverflowError, struct.error)
NOT_DECODED = (".sframe", ".ARM.exidx")


class ObjectCfi(NamedTuple):
    """One relocated CFI section of an object file."""
    name: str
    section: cfi.CfiSection
    targets: dict           # offset of a relocated field in the section -> name of the section it points into

    def target_of(self, fde: cfi.FDE) -> str | None:
        """The section an FDE's pc_begin points into, by the relocation at that field."""
        pc_begin = fde.offset + (12 if fde.is_64 else 4) + (8 if fde.is_64 and not self.section.is_eh else 4)
        return self.targets.get(pc_begin)


def cfi_sections(elf, arch, problems: list, file_size: int) -> list[ObjectCfi]:
    """The relocated .eh_frame and .debug_frame of an ELFFile of type ET_REL."""
    out = []
    handler = RelocationHandler(elf)
    names = [sec.name for sec in elf.iter_sections()]
    for name in NOT_DECODED:
        if name in names:
            problems.append("%s: not decoded in a relocatable object (its relocations are not applied)"
                            % name)
    for name in CFI_SECTIONS:
        sec = elf.get_section_by_name(name)
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            continue
        if sec["sh_offset"] + sec["sh_size"] > file_size:
            problems.append("%s: runs past the end of the file" % name)
            continue
        try:
            data = sec.data()
            targets = {}
            relocations = handler.find_relocations_for_section(sec)
            if relocations is not None:
                stream = io.BytesIO(data)
                handler.apply_section_relocations(stream, relocations)
                data = stream.getvalue()
                targets = _targets(elf, relocations)
        except PYELFTOOLS_ERRORS as exc:
            problems.append("%s: cannot apply its relocations: %s" % (name, exc or type(exc).__name__))
            continue
        kind = "eh_frame" if name == ".eh_frame" else "debug_frame"
        section = cfi.CfiSection(Region.from_bytes(name, 0, data, arch.byteorder), kind, arch)
        out.append(ObjectCfi(name, section, targets))
    return out


def _targets(elf, relocations) -> dict:
    symtab = elf.get_section(relocations["sh_link"])
    out = {}
    for reloc in relocations.iter_relocations():
        index = reloc["r_info_sym"]
        if index >= symtab.num_symbols():
            continue
        shndx = symtab.get_symbol(index)["st_shndx"]
        if isinstance(shndx, int) and 0 < shndx < elf.num_sections():
            out[reloc["r_offset"]] = elf.get_section(shndx).name
    return out
