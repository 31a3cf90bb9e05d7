"""Table dumps: every entry and row of every unwind source, or those covering an address.

Shared by `python -m plugin tables`, GDB's `unwind tables` and LLDB's, so
all three print the same entries in the same JSON shape.
"""

from .errors import DecodeError
from .formats import cfi
from .strategies.cfi import CfiTables


def collect(target, modules, address=None):
    """{"sources": [...], "problems": [...]} for every module (or the one holding address)."""
    sources, problems = [], []
    if address is None:
        chosen = modules.all()
    else:
        module = modules.find(address)
        chosen = [module] if module else []
        if module is None:
            problems.append("no module contains 0x%x" % address)
    for module in chosen:
        sources.extend(_cfi_sources(target, module, address, problems))
    for ref, reason in modules.failed:
        problems.append("%s: %s" % (ref.name, reason))
    return {"sources": sources, "problems": problems}


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
        lines.append("%s: %s %s at 0x%x (%d entries)" % (
            source["module"], source["section"], source["kind"].upper(), source["address"],
            len(source["entries"])))
        for entry in source["entries"]:
            head = "  [0x%x, 0x%x)" % (entry["start"], entry["end"])
            if "fde_offset" in entry:
                head += " FDE at +0x%x, CIE at +0x%x" % (entry["fde_offset"], entry["cie_offset"])
                if entry.get("augmentation"):
                    head += ", augmentation %r" % entry["augmentation"]
            lines.append(head)
            for row, row_text in zip(entry["rows"], entry["rows_text"]):
                lines.append("    0x%x: %s" % (row["address"], row_text))
    for problem in result["problems"]:
        lines.append("problem: %s" % problem)
    if not result["sources"] and not result["problems"]:
        lines.append("no unwind tables found")
    return "\n".join(lines)
