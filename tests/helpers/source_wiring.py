"""Count the product files whose code names each unwind source (issue 32 item 1, docs/design.md).

A file names a source when a string literal is exactly its name ("cfi"), or its code names
the Trust member (Trust.CFI), or imports the source's own modules by name; comments and
docstrings do not count. The source's own files (its decoders, strategy and dump, listed in
OWN) are left out: they are the source. Run: python tests/helpers/source_wiring.py [ROOT]
"""
from __future__ import annotations

import io
import pathlib
import re
import sys
import tokenize
from typing import Dict, List

SOURCES = ("cfi", "sframe", "compact", "exidx", "pdata", "orc", "analysis", "frame-pointer", "scan")
# A source's own files, by path pattern (relative to the checkout).
OWN = {
    "cfi": r"plugin/(formats/cfi/|strategies/cfi\.py|render/cfi_dump\.py)",
    "sframe": r"plugin/(formats/sframe\w*\.py|strategies/sframe\w*\.py|render/sframe_dump\.py)",
    "compact": r"plugin/(formats/compact_\w+\.py|strategies/compact\.py|render/compact_dump\.py)",
    "exidx": r"plugin/(formats/exidx\.py|strategies/exidx\w*\.py|render/exidx_dump\.py)",
    "pdata": r"plugin/(formats/(pe|pdata_\w+)\.py|strategies/pdata\.py|render/pe_tables\.py|modules/pe\.py|"
             r"file_targets/pe\.py|validate/pe\.py)",
    "orc": r"(plugin/(formats/orc\w*\.py|strategies/orc\.py|render/orc_dump\.py|modules/kernel\.py)"
           r"|gdb_unwinder/kernel_frames\.py)",
    "analysis": r"plugin/(analysis/|strategies/analysis\.py)",
    "frame-pointer": r"plugin/strategies/frame_pointer\.py",
    "scan": r"plugin/strategies/scan\.py",
}
PACKAGES = ("plugin", "gdb_unwinder", "lldb_commands")


def names_in(path: pathlib.Path) -> set:
    """The sources the file's code names (string literals, Trust members, module names)."""
    found = set()
    member = {s.upper().replace("-", "_"): s for s in SOURCES}
    module = {s.replace("-", "_"): s for s in SOURCES}
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.STRING:
            text = tok.string.strip("\"'")
            if text in SOURCES:
                found.add(text)
        elif tok.type == tokenize.NAME:
            before = tokens[i - 2].string if i >= 2 else ""
            if tokens[i - 1].string == "." and before == "Trust" and tok.string in member:
                found.add(member[tok.string])
            elif tok.string in module:
                imported = any(t.string == "import" for t in tokens[max(0, i - 8):i]) and tokens[i - 1].type != tokenize.OP
                if imported or before == "strategies":      # `import cfi`, `plugin.strategies.cfi`
                    found.add(module[tok.string])
    return found


def count(root: pathlib.Path) -> Dict[str, List[str]]:
    files: Dict[str, List[str]] = {s: [] for s in SOURCES}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            for source in names_in(path):
                if not re.match(OWN[source], rel):
                    files[source].append(rel)
    return files


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    result = count(root)
    print(" | ".join("%s %d" % (s, len(result[s])) for s in SOURCES))
    if "-v" in sys.argv:
        for s in SOURCES:
            print(s, " ".join(result[s]))
