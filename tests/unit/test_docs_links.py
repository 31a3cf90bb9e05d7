"""Every relative link and #anchor in README.md and docs/*.md resolves.

Anchors are GitHub's: a heading's text, lower-cased, with everything but
letters, digits, spaces, hyphens and underscores dropped, spaces turned into
hyphens, and -1, -2, ... appended to repeats. Links inside code (fenced
blocks and `inline code`) are not links.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> List[str]:
    """The file's lines outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    found: Set[str] = set()
    seen: Dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def links(path: Path) -> List[Tuple[int, str]]:
    return [(number, target)
            for number, line in enumerate(prose_lines(path.read_text()), 1)
            for target in LINK.findall(line)]


def test_the_docs_exist():
    names = {p.name for p in DOCS}
    assert "README.md" in names and len(DOCS) > 5


def test_slug_is_githubs():
    assert slug("LLDB's own frames through the plugin (LLDB 22)") == "lldbs-own-frames-through-the-plugin-lldb-22"
    assert slug("GDB's own `bt`") == "gdbs-own-bt"
    assert slug("Validate: tables against a real call (GDB and LLDB)") == \
        "validate-tables-against-a-real-call-gdb-and-lldb"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(path: Path):
    broken = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append("%d: %s (no such file)" % (number, target))
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append("%d: %s (no heading with that anchor in %s)" % (number, target, dest.name))
    assert not broken, "%s:\n%s" % (path.relative_to(ROOT), "\n".join(broken))
