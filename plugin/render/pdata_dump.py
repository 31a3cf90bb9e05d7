"""The `pdata` source's dump (render/tables.DUMPS): a PE module's .pdata entries, read from the
debuggee's memory where a loader mapped the image (`unwind tables` in GDB and LLDB), each as
the JSON of plugin.render.pe_tables (addresses where the image is mapped) and as text lines.
`python -m plugin tables FILE.dll` reads files through pe_tables itself."""
from __future__ import annotations

from typing import List

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import pe
from plugin.render.pe_tables import covers, entries_json
from plugin.render.style import Styled, plain
from plugin.strategies.pdata import PdataTables
from plugin.modules.pe import SECTION


def table_sources(target, module, address, problems) -> List[dict]:
    """[{"kind": "pdata", ...}] for a PE module: every entry, or those covering address."""
    if getattr(module, "format", None) != "pe":
        return []
    base = module.header_address
    try:
        headers = pe.read_headers(target.read_memory, base)
        if not headers.exception_rva:
            return []
        read = PdataTables.of(module, target).read_rva
        entries = entries_json(read, headers, problems, base)
    except (DecodeError, MemoryReadError) as exc:
        problems.append("%s %s: %s" % (module.name, SECTION, exc))
        return []
    if address is not None:
        entries = [e for e in entries if covers(e, address)]
        if not entries:
            return []
    return [{"kind": "pdata", "module": module.name, "section": SECTION, "machine": headers.machine.name,
             "address": base + headers.exception_rva,
             "image_base": base, "entries": entries}]


def _opcodes(ops: List[dict]) -> str:
    return ", ".join(op["name"] + (" " + op["register"] if op["register"] else "") +
                     (" #%d" % op["operand"] if op["operand"] else "") for op in ops)


def entry_text(entry: dict, style=plain) -> List[str]:
    """Lines of `unwind tables` for one .pdata entry."""
    at = lambda address: style(Styled.ADDRESS, "0x%x" % address)       # noqa: E731
    if "end" in entry:                  # x64
        lines = ["  [%s, %s) RUNTIME_FUNCTION, UNWIND_INFO at %s" % (at(entry["start"]), at(entry["end"]),
                                                                     at(entry["unwind_info"]))]
        for record in entry.get("records", ()):
            lines.append("    version %d flags 0x%x prolog %d frame register %s offset 0x%x, %d slots%s" % (
                record["version"], record["flags"], record["prolog_size"], record["frame_register"] or "-",
                record["frame_offset"], record["code_slots"],
                ", chained to [0x%x, 0x%x)" % (record["chained"]["start"], record["chained"]["end"])
                if record["chained"] else ""))
            lines.extend("      0x%02x: %s" % (code["offset"], code["text"]) for code in record["codes"])
    elif "packed" in entry:
        p = entry["packed"]
        lines = ["  %s %s: FunctionLength %d RegF %d RegI %d H %d CR %d (%s) FrameSize %d" % (
            at(entry["start"]), entry["flag"], p["function_length"], p["reg_f"], p["reg_i"], p["homed"],
            p["cr"], p["cr_name"], p["frame_size"])]
    else:
        x = entry.get("xdata")
        lines = ["  %s %s%s" % (at(entry["start"]), entry["flag"],
                                ": .xdata at 0x%x, FunctionLength %d" % (x["address"], x["function_length"])
                                if x else "")]
        if x:
            lines.append("    prologue: %s" % _opcodes(x["prologue"]))
            if x["epilogue_packed"]:
                lines.append("    epilogue (packed, from index %d): %s" % (x["epilogue_index"], _opcodes(x["epilogue"])))
            for scope in x.get("epilogue_scopes", ()):
                lines.append("    epilogue at +0x%x: %s" % (scope["offset"], _opcodes(scope["opcodes"])))
    if "problem" in entry:
        lines.append("    problem: %s" % entry["problem"])
    return lines
