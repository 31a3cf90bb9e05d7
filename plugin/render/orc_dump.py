"""The ORC tables of a kernel image on disk (vmlinux), for `tables`.

The sections are found by name in the section headers (a vmlinux extracted
from a bzImage has no symbols); the layout by plugin.formats.orc.choose_layout.
One source per file: every entry as [ip, next ip) and its rule.
"""
from __future__ import annotations

from typing import Iterator, List, Optional

from plugin.file_targets.orc import SECTION_ENTRIES, SECTION_IP, OrcImage
from plugin.formats import orc
from plugin.render.style import Styled, plain

class _Entries:
    """The entries as JSON-ready dicts, lazily (a vmlinux has hundreds of thousands)."""

    def __init__(self, image: OrcImage, address: Optional[int]) -> None:
        self._image, self._address = image, address
        self._count = image.count
        if address is not None:
            index = image.table().find(address)
            self._only = index
            self._count = 0 if index is None else 1

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        previous = None
        wanted = getattr(self, "_only", None)
        added_after = orc.sp_indirect_adds_after(self._image.release)
        for entry in self._image.entries():
            if previous is not None and (wanted is None or previous.index == wanted):
                yield entry_json(previous, entry.ip, added_after)
            previous = entry
        if previous is not None and (wanted is None or previous.index == wanted):
            yield entry_json(previous, None, added_after)


def entry_json(entry: orc.OrcEntry, end: Optional[int], added_after: bool = True) -> dict:
    """added_after: SP_INDIRECT as since v5.12 (orc.sp_indirect_adds_after of the kernel's release)."""
    return {"index": entry.index, "start": entry.ip, "end": end, "type": entry.type.value,
            "cfa": orc.reg_text(entry.sp_reg, entry.sp_offset, added_after), "sp_reg": entry.sp_reg,
            "sp_offset": entry.sp_offset, "bp_reg": entry.bp_reg, "bp_offset": entry.bp_offset,
            "signal": entry.signal, "end_bit": entry.end, "flags": entry.flags,
            "text": orc.entry_text(entry, added_after)}


def table_sources(target, module, address: Optional[int], problems: List[str]) -> List[dict]:
    """[{"kind": "orc", ...}] for the file's ORC sections (only for the module that is the file itself),
    or, for a running kernel (plugin.modules.kernel), the entry in force at address read from its memory."""
    if getattr(module, "format", None) == "kernel":
        return _live_sources(target, module, address, problems)
    elf = getattr(target, "elf", None)
    if elf is None or getattr(module, "path", None) != getattr(target, "path", None):
        return []
    image = OrcImage(elf, getattr(target, "_data", b""))
    if not image.found:
        return []
    problems.extend("%s: %s" % (module.name, note) for note in image.notes)
    entries = _Entries(image, address)
    if address is not None and not len(entries):
        return []
    return [{"kind": "orc", "module": module.name, "section": SECTION_ENTRIES, "address": image.entries_address,
             "ip_table": image.ip_address, "layout": image.layout.value, "layout_found_by": image.found_by.value,
             "kernel": image.release, "found_by": "section headers", "entries": entries}]


def _live_sources(target, module, address, problems):
    """The running kernel's entry at address (its whole table is not read over a gdbstub: none without one)."""
    from plugin.strategies.orc import OrcTables
    tables = OrcTables.of(module, target)
    loaded = tables.table()
    if loaded is None:
        problems.extend("%s: %s" % (module.name, problem) for problem in tables.problems)
        return []
    table, found_by, notes = loaded
    index = table.find(address) if address is not None else None
    if index is None:
        return []
    problems.extend("%s: %s" % (module.name, note) for note in notes)
    end = table.ip(index + 1) if index + 1 < table.count else None
    location = module.tables[SECTION_ENTRIES]
    return [{"kind": "orc", "module": module.name, "section": SECTION_ENTRIES, "address": location.address,
             "ip_table": module.tables[SECTION_IP].address, "layout": table.layout.value,
             "layout_found_by": found_by.value, "kernel": module.cache.get("kernel release"),
             "found_by": location.found_by,
             "entries": [entry_json(table.entry(index), end,
                                    orc.sp_indirect_adds_after(module.cache.get("kernel release")))]}]


def head_text(source: dict) -> str:
    return "  ORC layout %s (by %s)%s" % (source["layout"], source["layout_found_by"],
                                         ", kernel %s" % source["kernel"] if source.get("kernel") else "")


def entry_text(entry: dict, style=plain) -> Iterator[str]:
    end = "end" if entry["end"] is None else "0x%x" % entry["end"]
    if style is plain:
        yield "  [0x%x, %s) %s" % (entry["start"], end, entry["text"])
    else:
        yield "  [%s, %s) %s" % (style(Styled.ADDRESS, "0x%x" % entry["start"]), end, entry["text"])
