"""Table dumps: every entry and row of every unwind source, or those covering an address.

Shared by `python -m plugin tables`, GDB's `unwind tables` and LLDB's, so
all three print the same entries in the same JSON shape.

Every dump goes through iter_sources, which is where a damaged file is
turned into its documented outcome (plugin.errors.guard): whatever a
source's decoder, the file's symbols or pyelftools raise on bad bytes, while
the source is found or while its entries are produced, becomes one problem
line naming the module and the source, and the other sources and modules
are still dumped. A source added later is guarded without doing anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional

from plugin.validate import agreement as row_agreement
from plugin.errors import DecodeError, guard
from plugin.render import cfi_dump, compact_dump, exidx_dump, orc_dump, pdata_dump, sframe_dump
from plugin.strategies import exidx as exidx_strategy
from plugin.strategies import sframe as sframe_strategy
from plugin.render.cfi_dump import Want
from plugin.render.style import Styled, plain
from plugin.strategies.cfi import CfiTables


class Problems(list):
    """The problems a dump met, in order; `misses` counts those that say only
    that no module holds the address asked for (not a bad entry)."""
    misses = 0



@dataclass(frozen=True)
class Dump:
    """How one source's tables are dumped (the render-layer binding of its declaration)."""
    table_sources: Callable      # (target, module, address, problems[, want]) -> [{"kind": ..., "entries": ...}]
    entry_text: Callable         # (entry, style) -> its lines
    head_text: Optional[Callable] = None      # (source) -> one line after the source's title
    renderings: bool = False     # table_sources takes want= (cfi_dump.Want)
    object_file: Optional[Callable] = None    # (target, address, problems) -> sources of a relocatable object


# Every source's dump, by the "kind" its sources carry, in the order a module's tables are dumped.
DUMPS = {
    "compact": Dump(compact_dump.table_sources, compact_dump.entry_text),
    "cfi": Dump(cfi_dump.sources, cfi_dump.entry_text, renderings=True, object_file=cfi_dump.object_file_sources),
    "sframe": Dump(sframe_dump.table_sources, sframe_dump.entry_text),
    "exidx": Dump(exidx_strategy.table_sources, exidx_dump.entry_text),
    "orc": Dump(orc_dump.table_sources, orc_dump.entry_text, head_text=orc_dump.head_text),
    "pdata": Dump(pdata_dump.table_sources, pdata_dump.entry_text),
}

def iter_sources(target, modules, address=None, problems=None, kinds=None, want=Want.BOTH):
    """Each table source of every module (or of the one holding address), its
    "entries" lazy (Entries, or a list). Problems are appended to `problems`
    as they are met, some only while the entries are iterated. `kinds`: only
    the sources of these kinds ("cfi", "sframe", "compact", "exidx", "orc"); `want`:
    which renderings of the CFI rows (cfi_dump.Want)."""
    problems = [] if problems is None else problems
    if address is None:
        chosen = modules.all()
    else:
        module = modules.find(address)
        chosen = [module] if module else []
        if module is None:
            problems.append("no module contains 0x%x" % address)
            if isinstance(problems, Problems):
                problems.misses += 1
    chosen_dumps = [(kind, dump) for kind, dump in DUMPS.items() if kinds is None or kind in kinds]
    if getattr(target, "relocatable", False):
        for kind, dump in chosen_dumps:
            if dump.object_file is not None:
                yield from _guarded(lambda: dump.object_file(target, address, problems), problems,
                                    "%s: %s" % (getattr(target, "name", "file"), kind))
        _note_file_problems(target, problems)
        return
    for module in chosen:
        for kind, dump in chosen_dumps:
            extra = {"want": want} if dump.renderings else {}
            yield from _guarded(lambda: dump.table_sources(target, module, address, problems, **extra), problems,
                                "%s: %s" % (module.name, kind))
    for ref, reason in modules.failed:
        problems.append("%s: %s" % (ref.name, reason))
    _note_file_problems(target, problems)


def _guarded(produce, problems, what):
    """The sources `produce()` returns, each with its entries guarded: a damaged
    file costs the rest of that source only (one problem line)."""
    found = []
    with guard(problems, what):
        found = list(produce())
    for source in found:
        yield dict(source, entries=GuardedEntries(source["entries"], problems, what))


class GuardedEntries:
    """A source's entries (a list, or lazy), counted and iterated under plugin.errors.guard."""

    def __init__(self, entries, problems, what):
        self._entries, self._problems, self._what = entries, problems, what

    def __len__(self):
        with guard(self._problems, self._what):
            return len(self._entries)
        return 0

    def __iter__(self):
        with guard(self._problems, self._what):
            yield from self._entries


def _note_file_problems(target, problems):
    """What the target met reading the file after it was opened (its symbols), once."""
    noted = getattr(target, "problems", None)
    if noted:
        problems.extend(noted)
        del noted[:]


def collect(target, modules, address=None):
    """{"sources": [...], "problems": [...]} for every module (or the one holding address).

    With an address there is also "agreement": the CFI row and the SFrame
    row in force there compared (plugin.validate.agreement), or null unless both
    sources cover the address.
    """
    problems = []
    sources = [dict(source, entries=list(source["entries"]))
               for source in iter_sources(target, modules, address, problems)]
    result = {"sources": sources, "problems": problems}
    if address is not None:
        result["agreement"] = agreement_at(target, modules, address, problems)
    return result


def agreement_at(target, modules, address, problems):
    """The CFI and SFrame rows in force at address compared, or None."""
    module = modules.find(address)
    if module is None:
        return None
    with guard(problems, "%s: rows at 0x%x" % (module.name, address)):
        return _agreement(target, module, address, problems)
    return None


def write_json(target, modules, address, out, kinds=None):
    """collect()'s JSON written to `out` as it is produced: one entry at a
    time, with the C encoder (no indentation). Returns the Problems."""
    problems = Problems()
    out.write('{"sources": [')
    for n, source in enumerate(iter_sources(target, modules, address, problems, kinds, Want.BOTH)):
        head = json.dumps({k: v for k, v in source.items() if k != "entries"})
        out.write(("," if n else "") + "\n" + head[:-1] + ', "entries": [')
        for i, entry in enumerate(source["entries"]):
            out.write(("," if i else "") + "\n" + json.dumps(entry))
        out.write("]}")
    tail = {"problems": problems}
    if address is not None:
        tail["agreement"] = agreement_at(target, modules, address, problems)
    out.write("\n], " + json.dumps(tail)[1:] + "\n")
    return problems


def write_text(target, modules, address, out, kinds=None, style=plain):
    """text() written to `out` as the entries are produced. Returns the Problems."""
    problems = Problems()
    any_source = False
    for source in iter_sources(target, modules, address, problems, kinds, Want.TEXT):
        any_source = True
        for line in _source_lines(source, style):
            out.write(line + "\n")
    result = {"sources": [True] if any_source else [], "problems": problems}
    if address is not None:
        result["agreement"] = agreement_at(target, modules, address, problems)
    for line in _tail_lines(result):
        out.write(line + "\n")
    return problems


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


def text(result, style=plain):
    """The collected tables for people: one block per entry, one line per row.
    style: how module names and addresses are coloured (render.style)."""
    lines = []
    for source in result["sources"]:
        lines.extend(_source_lines(source, style))
    lines.extend(_tail_lines(result))
    return "\n".join(lines)


def _source_lines(source, style=plain):
    count = len(source["entries"])
    yield "%s: %s %s at %s (%d %s)" % (
        style(Styled.FILE, source["module"]), source["section"], source["kind"].upper(),
        style(Styled.ADDRESS, "0x%x" % source["address"]), count, "entry" if count == 1 else "entries")
    head_text = DUMPS[source["kind"]].head_text
    if head_text is not None:
        yield head_text(source)
    entry_text = DUMPS[source["kind"]].entry_text
    for entry in source["entries"]:
        yield from entry_text(entry, style)


def _tail_lines(result):
    lines = []
    if result.get("agreement"):
        lines.append(row_agreement.text(result["agreement"]))
    for problem in result["problems"]:
        lines.append("problem: %s" % problem)
    if not result["sources"] and not result["problems"]:
        lines.append("no unwind tables found")
    return lines
