"""ARM EHABI entries of `unwind tables` for people: one block per .ARM.exidx
entry (from plugin.strategies.exidx.table_sources), with its personality,
opcodes, what each instruction did and the row they give."""
from __future__ import annotations

from typing import List

from plugin.render.style import Styled, plain


def entry_text(entry: dict, style=plain) -> List[str]:
    """Lines for one entry of exidx.table_sources; style colours addresses."""
    at = lambda address: style(Styled.ADDRESS, "0x%x" % address)       # noqa: E731
    head = "  [%s, %s) %s" % (at(entry["start"]), at(entry["end"]), entry["kind"])
    if entry.get("model"):
        who = entry.get("personality_name")
        if not who:
            personality = entry.get("personality")
            who = "personality 0x%x" % personality if personality is not None else "personality not known"
        head += ", %s model, %s, opcodes %s" % (entry["model"], who, entry.get("opcodes") or "-")
    lines = [head]
    if entry.get("error"):
        lines.append("    error: %s" % entry["error"])
    for ins in entry.get("instructions", ()):
        lines.append("    %-8s %-28s %s" % (ins["bytes"], ins["text"], ins["effect"]))
    for row_text in entry.get("rows_text", ()):
        lines.append("    row: %s" % row_text)
    return lines
