"""The ORC sections of a kernel image on disk (vmlinux), read for `tables` and `validate`.

The sections are found by name in the section headers (a vmlinux extracted
from a bzImage has no symbols); the layout by plugin.formats.orc.choose_layout.
"""
from __future__ import annotations

from typing import Iterator

from plugin.formats import orc

SECTION_IP, SECTION_ENTRIES, SECTION_HEADER = ".orc_unwind_ip", ".orc_unwind", ".orc_header"


class OrcImage:
    """The ORC sections of an ELF file (pyelftools' ELFFile), decoded on demand."""

    def __init__(self, elf, data) -> None:
        sections = {}
        for section in elf.iter_sections():
            if section.name in (SECTION_IP, SECTION_ENTRIES, SECTION_HEADER) and section["sh_type"] == "SHT_PROGBITS":
                sections.setdefault(section.name, section)
        self.found = SECTION_IP in sections and SECTION_ENTRIES in sections
        if not self.found:
            return
        ip_section, entry_section = sections[SECTION_IP], sections[SECTION_ENTRIES]
        self.ip_address = ip_section["sh_addr"]
        self.entries_address = entry_section["sh_addr"]
        self.ip_bytes = ip_section.data()
        self.entry_bytes = entry_section.data()
        self.count = orc.check_sizes(len(self.ip_bytes), len(self.entry_bytes))
        header = sections.get(SECTION_HEADER)
        self.release = None if header is not None else orc.find_version_string(data)
        self.layout, self.found_by, self.notes = orc.choose_layout(
            None if header is None else header.data(), self.release, orc.all_flags(self.entry_bytes))

    def entries(self) -> Iterator[orc.OrcEntry]:
        return orc.decode_all(self.ip_bytes, self.entry_bytes, self.ip_address, self.layout)

    def table(self) -> orc.OrcTable:
        """The tables as an OrcTable reading these bytes (the same lookups as over a live kernel)."""
        def read(address: int, size: int) -> bytes:
            for base, blob in ((self.ip_address, self.ip_bytes), (self.entries_address, self.entry_bytes)):
                if base <= address and address + size <= base + len(blob):
                    return bytes(blob[address - base:address - base + size])
            raise ValueError("0x%x is outside the ORC sections" % address)
        return orc.OrcTable(self.ip_address, self.entries_address, self.count, self.layout, read)
