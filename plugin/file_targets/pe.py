"""A Target made of a PE file (x64, ARM64) laid out in memory as Windows' loader would.

The headers sit at the ImageBase and each section at ImageBase + its RVA, so the
module scan (plugin/modules/pe.py) and the `pdata` source read the file through
the same paths as an image mapped in a live process. Functions are named from the
COFF symbol table when the file has one (lld-link /debug:symtab).
"""
from __future__ import annotations

import os

from plugin import arch as arches
from plugin.formats import pe
from plugin.modules.pe import ARCH_OF_MACHINE, PAGE
from plugin.target import ModuleRef
from plugin.file_targets.elf import LaidOutFile, map_regular_file


class PeFileTarget(LaidOutFile):
    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        self._data = map_regular_file(path)
        self.headers = pe.read_headers(pe.file_reader(self._data))
        self.arch = arches.by_name(ARCH_OF_MACHINE[self.headers.machine])
        base = self.header_address = self.headers.image_base
        sections = self.headers.sections
        first = min((s.virtual_address for s in sections), default=PAGE)
        pieces = [(base, base + first, 0, min(first, len(self._data)), False)]
        for s in sections:
            size = (max(s.virtual_size, s.raw_size) + PAGE - 1) & ~(PAGE - 1)
            if size:
                held = min(s.raw_size, s.virtual_size or s.raw_size)
                pieces.append((base + s.virtual_address, base + s.virtual_address + size, s.raw_offset, held,
                               s.executable))
        self._lay_out(pieces)

    def _file_bytes(self, offset: int, size: int) -> bytes:
        return bytes(self._data[offset:offset + size])

    def modules(self) -> list:
        return [ModuleRef(self.name, self.header_address, self.path)]

    def _read_symbols(self) -> tuple:
        base = self.header_address
        found = sorted(set(pe.function_symbols(self._data, self.headers)))
        entries = []
        for n, (rva, name) in enumerate(found):
            section = pe.section_of(self.headers, rva)
            end = section.virtual_address + max(section.virtual_size, section.raw_size) if section else rva + 1
            if n + 1 < len(found):
                end = min(end, found[n + 1][0])
            entries.append((base + rva, base + end, name))
        return [e[0] for e in entries], entries
