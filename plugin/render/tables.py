"""Table dumps: every entry and row of every unwind source, or those covering an address.

Shared by `python -m plugin tables`, GDB's `unwind tables` and LLDB's, so
all three print the same entries in the same JSON shape.
"""

from plugin.validate import agreement as row_agreement
from plugin.errors import DecodeError
from plugin.formats import cfi
from plugin.render import compact_dump, sframe_dump
from plugin.strategies import exidx as exidx_strategy
from plugin.strategies import sframe as sframe_strategy
from plugin.strategies.cfi import CfiTables


def collect(target, modules, address=None):
    """{"sources": [...], "problems": [...]} for every module (or the one holding address).

    With an address there is also "agreement": the CFI row and the SFrame
    row in force there compared (plugin.validate.agreement), or null unless both
    sources cover the address.
    """
    sources, problems = [], []
    if address is None:
        chosen = modules.all()
    else:
        module = modules.find(address)
        chosen = [module] if module else []
        if module is None:
            problems.append("no module contains 0x%x" % address)
    agreement = None
    for module in chosen:
        sources.extend(compact_dump.table_sources(target, module, address, problems))
        sources.extend(_cfi_sources(target, module, address, problems))
        sources.extend(_sframe_sources(target, module, address, problems))
        sources.extend(exidx_strategy.table_sources(target, module, address, problems))
        if address is not None:
            agreement = _agreement(target, module, address, problems)
    for ref, reason in modules.failed:
        problems.append("%s: %s" % (ref.name, reason))
    result = {"sources": sources, "problems": problems}
    if address is not None:
        result["agreement"] = agreement
    return result


def _sframe_sources(target, module, address, problems):
    tables = sframe_strategy.SFrameTables.of(module, target)
    section = tables.section()
    problems.extend("%s %s" % (module.name, p) for p in tables.problems)
    if section is None:
        return []
    try:
        if address is None:
            found = list(enumerate(section.fdes))
        else:
            hit = section.find_fde(address)
            found = [hit] if hit else []
        entries = [sframe_dump.fde_table_json(section, index, fde, module.arch, address)
                   for index, fde in found]
    except DecodeError as exc:
        problems.append("%s .sframe: %s" % (module.name, exc))
        return []
    if address is not None and not entries:
        return []
    return [sframe_dump.source_json(module, sframe_strategy.SECTION, section, entries)]


def _agreement(target, module, address, problems):
    """The CFI and SFrame rows in force at address, compared; None unless both exist."""
    try:
        cfi_hit = CfiTables.of(module, target).row_for(address)
        sframe_hit = sframe_strategy.SFrameTables.of(module, target).row_for(address)
    except DecodeError as exc:
        problems.append("%s: rows at 0x%x: %s" % (module.name, address, exc))
        return None
    if cfi_hit is None or sframe_hit is None:
        return None
    name, section, fde, _, cfi_row = cfi_hit
    index, sfde, fre, sframe_row = sframe_hit
    out = row_agreement.compare(cfi_row, sframe_row, module.arch, address)
    out["module"] = module.name
    out["cfi_row"] = {"section": name, "fde_offset": fde.offset, "row": cfi_row.to_json(module.arch),
                      "row_text": cfi_row.text(module.arch)}
    out["sframe_row"] = {"fde_index": index, "fre_index": None if fre is None else fre.index,
                         "row": sframe_row.to_json(module.arch), "row_text": sframe_row.text(module.arch)}
    return out


def _cfi_sources(target, module, address, problems):
    arch = module.arch
    tables = CfiTables.of(module, target)
    out = []
    for name, section in tables.sections():
        try:
            if address is None:
                fdes = section.fdes()
            else:
                fde = section.find_fde(address)
                fdes = [fde] if fde else []
            entries = [_fde_json(fde, arch, address) for fde in fdes]
        except DecodeError as exc:
            problems.append("%s %s: %s" % (module.name, name, exc))
            continue
        if address is not None and not entries:
            continue
        out.append({"kind": "cfi", "module": module.name, "section": name,
                    "address": section.region.address, "entries": entries})
    problems.extend("%s %s" % (module.name, p) for p in tables.problems)
    return out


def _fde_json(fde, arch, address):
    rows = cfi.execute(fde, arch)
    if address is not None:
        rows = [r for r in rows if r.address <= address < r.end]
    return {"start": fde.start, "end": fde.end, "fde_offset": fde.offset,
            "cie_offset": fde.cie.offset, "augmentation": fde.cie.augmentation,
            "signal_frame": fde.cie.signal_frame,
            "rows": [r.to_json(arch) for r in rows],
            "rows_text": [r.text(arch) for r in rows]}


def text(result):
    """The collected tables for people: one block per entry, one line per row."""
    lines = []
    for source in result["sources"]:
        lines.append("%s: %s %s at 0x%x (%d %s)" % (
            source["module"], source["section"], source["kind"].upper(), source["address"],
            len(source["entries"]), "entry" if len(source["entries"]) == 1 else "entries"))
        for entry in source["entries"]:
            if source["kind"] == "sframe":
                lines.extend(sframe_dump.entry_text(entry))
                continue
            if source["kind"] == "compact":
                lines.extend(compact_dump.entry_text(entry))
                continue
            head = "  [0x%x, 0x%x)" % (entry["start"], entry["end"])
            if "fde_offset" in entry:
                head += " FDE at +0x%x, CIE at +0x%x" % (entry["fde_offset"], entry["cie_offset"])
                if entry.get("augmentation"):
                    head += ", augmentation %r" % entry["augmentation"]
            lines.append(head)
            for row, row_text in zip(entry["rows"], entry["rows_text"]):
                lines.append("    0x%x: %s" % (row["address"], row_text))
    if result.get("agreement"):
        lines.append(row_agreement.text(result["agreement"]))
    for problem in result["problems"]:
        lines.append("problem: %s" % problem)
    if not result["sources"] and not result["problems"]:
        lines.append("no unwind tables found")
    return "\n".join(lines)
