"""The `unwind tables` text of a .sframe section; the JSON facts it prints come from
plugin/strategies/sframe_entry.py (re-exported here for render/tables.py)."""

from plugin.errors import DecodeError
from plugin.render.style import Styled, plain
from plugin.strategies import sframe
from plugin.strategies.sframe_entry import entry_json, fde_table_json, source_json  # noqa: F401


def entry_text(entry, style=plain):
    """Lines of `unwind tables` text for one SFrame entry (from fde_table_json); style colours addresses."""
    at = lambda address: style(Styled.ADDRESS, "0x%x" % address)       # noqa: E731
    head = "  [%s, %s) SFrame FDE %d at +0x%x, %s" % (
        at(entry["start"]), at(entry["end"]), entry["fde_index"], entry["fde_offset"], entry["fde_type"])
    if entry["pc_type"] == "mask":
        head += ", pc type mask (repeats every %d bytes)" % entry["rep_size"]
    if entry["signal_frame"]:
        head += ", signal frame"
    if entry.get("pauth_key"):
        head += ", pauth key %s" % entry["pauth_key"]
    lines = [head]
    if entry["outermost"]:
        lines.append("    no FREs: outermost frame")
    for row, row_text, fre in zip(entry["rows"], entry["rows_text"], entry["fres"]):
        lines.append("    %s: %s" % (at(row["address"]), row_text))
        if fre["fre_index"] is not None:
            words = ", ".join("%d" % w["value"] for w in fre["data_words"])
            lines.append("      FRE %d at +0x%x, base %s, %d-byte data words [%s]%s" % (
                fre["fre_index"], fre["fre_offset"], fre["cfa_base"], fre["data_word_size"], words,
                ", RA signed" if fre["ra_mangled"] else ""))
        lines.append("      %s; %s; %s" % (fre["rules"]["cfa"], fre["rules"]["fp"], fre["rules"]["ra"]))
    return lines


def table_sources(target, module, address, problems):
    """[{"kind": "sframe", ...}] for the module's .sframe (the FDEs covering address, or all)."""
    tables = sframe.SFrameTables.of(module, target)
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
        entries = [fde_table_json(section, index, fde, module.arch, address)
                   for index, fde in found]
    except DecodeError as exc:
        problems.append("%s .sframe: %s" % (module.name, exc))
        return []
    if address is not None and not entries:
        return []
    return [source_json(module, sframe.SECTION, section, entries)]
