"""The `unwind tables` dump of a Mach-O module's compact unwind (__unwind_info):
every entry (or the one covering an address) with its opcode, its decoded
meaning and the rows it gives, and the text lines of one entry.

The `compact` strategy decides; this module only shows its tables
(render/tables.py collects every source).
"""

from plugin.errors import DecodeError
from plugin.formats import cfi
from plugin.modules.module import ModuleFormat
from plugin.render.style import Styled, plain
from plugin.strategies import compact


def table_sources(target, module, address, problems):
    """[{"kind": "compact", ...}] for a Mach-O module's __unwind_info: every
    entry, or the one covering address. Problems are appended to `problems`."""
    if module.format != ModuleFormat.MACHO:
        return []
    tables = compact.CompactTables.of(module, target)
    out = []
    try:
        ui = tables.unwind_info()
        if ui is not None:
            if address is None:
                entries = tables.entries()
            else:
                found = ui.lookup(address)
                entries = [found] if found else []
            items = [_entry_json(tables, ui, entry, address, problems) for entry in entries]
            problems.extend("%s %s: %s" % (module.name, compact.SECTION, w) for w in ui.warnings)
            if items or address is None:
                out.append({"kind": "compact", "module": module.name, "section": compact.SECTION,
                            "address": ui.region.address, "image_base": ui.image_base,
                            "entries": items})
    except DecodeError as exc:
        problems.append("%s %s: %s" % (module.name, compact.SECTION, exc))
    problems.extend("%s %s" % (module.name, p) for p in tables.problems)
    return out


def _entry_json(tables, ui, entry, address, problems):
    """One entry: its range, opcode, decoded meaning and the rows it gives.

    "row" is the opcode's own row (null for DWARF, NONE and unknown modes);
    "rows" is that row, or for a DWARF-mode opcode the rows of the FDE it
    points at ("dwarf" says which), filtered to address when one is given.
    """
    arch = ui.arch
    out = {"start": entry.function_start, "end": entry.function_end, "encoding": entry.encoding,
           "encoding_hex": "0x%08x" % entry.encoding, "mode": None, "text": None,
           "page": entry.page_index, "row": None, "rows": [], "rows_text": []}
    try:
        decoded = ui.decode(entry)
        out["mode"], out["text"] = decoded.mode, decoded.text
        if decoded.mode == "DWARF":
            section, fde = tables.dwarf_fde(decoded)
            out["dwarf"] = {"fde_offset": fde.offset, "cie_offset": fde.cie.offset, "start": fde.start,
                            "end": fde.end, "eh_frame_address": section.region.address}
            rows = cfi.execute(fde, arch)
        else:
            row = ui.row(entry, read_code=tables.read_code)
            rows = [row] if row is not None else []
            if row is not None:
                out["row"] = row.to_json(arch)
                if decoded.mode == "STACK_IND":
                    out["stack_size"] = row.cfa.offset
    except DecodeError as exc:
        out["error"] = str(exc)
        problems.append("%s %s entry [0x%x, 0x%x): %s" % (tables.module.name, compact.SECTION, entry.function_start,
                                                          entry.function_end, exc))
        return out
    if address is not None:
        rows = [r for r in rows
                if r.address <= address < (r.end if r.end is not None else entry.function_end)]
    out["rows"] = [r.to_json(arch) for r in rows]
    out["rows_text"] = [r.text(arch) for r in rows]
    return out


def entry_text(entry, style=plain):
    """Lines of `tables.text` for one compact entry; style colours addresses."""
    at = lambda address: style(Styled.ADDRESS, "0x%x" % address)       # noqa: E731
    head = "  [%s, %s) compact %s (page %s): %s" % (
        at(entry["start"]), at(entry["end"]), entry["encoding_hex"], entry["page"], entry["text"] or "?")
    lines = [head]
    if "dwarf" in entry:
        lines.append("    -> __eh_frame FDE at +0x%x, CIE at +0x%x, [0x%x, 0x%x)" % (
            entry["dwarf"]["fde_offset"], entry["dwarf"]["cie_offset"], entry["dwarf"]["start"],
            entry["dwarf"]["end"]))
    if "error" in entry:
        lines.append("    error: %s" % entry["error"])
    for row, row_text in zip(entry["rows"], entry["rows_text"]):
        lines.append("    %s: %s" % (at(row["address"]), row_text))
    return lines
