"""The CFI part of table dumps (render/tables.py): one source per .eh_frame /
.debug_frame, each FDE an entry with its rows.

Whole-section dumps are streamed: FDEs are decoded one at a time as the
entries are iterated and not kept (the count in the heading comes from a
walk over the entry headers alone), so a dump of libLLVM holds one FDE at a
time. A bad entry costs only itself (CfiSection.walk); a bad instruction
costs the rows from it to the FDE's end, which the entry says ("error",
"unknown_from"). Row text and JSON are memoized (RowRenderer): a library
repeats a few thousand distinct rows over its many FDEs; in text mode FDEs
with the same program also share their row texts (_text_entry).
"""

from __future__ import annotations

from enum import Enum
from typing import Iterator

from plugin.errors import DecodeError
from plugin.formats import cfi
from plugin.render.style import Styled, plain
from plugin.strategies.cfi import CfiTables, ra_column_problem
from plugin.file_targets import object_file

ROW_CACHE = 1 << 16         # distinct rows remembered per renderer


class Want(Enum):
    """Which renderings of the rows an entry carries."""
    BOTH = "both"           # "rows" (JSON) and "rows_text": JSON, and every debugger's `unwind tables`
    TEXT = "text"           # "rows_text" and "row_addresses" only: the offline text mode


class Entries:
    """A source's entries, converted to dicts one at a time as they are iterated."""

    def __init__(self, items, convert, count=None):
        self._items = items
        self._convert = convert
        self._count = count

    def __len__(self):
        return len(self._items) if self._count is None else self._count()

    def __iter__(self):
        return map(self._convert, self._items)


class _Stream:
    """The FDEs of a whole section, decoded as iterated and not kept; bad
    entries go to `problems` as the walk meets them."""

    def __init__(self, section, module_name, problems):
        self.section, self.module_name, self.problems = section, module_name, problems

    def count(self):
        return self.section.count_fdes()

    def __iter__(self):
        for entry in self.section.walk(keep=False):
            if isinstance(entry, DecodeError):
                self.problems.append("%s %s" % (self.module_name, entry))
            elif isinstance(entry, cfi.FDE):
                yield entry


class RowRenderer:
    """Row.text and Row.to_json, memoized by what the row says (not where)."""

    def __init__(self, arch):
        self.arch = arch
        self._text = {}
        self._json = {}

    @staticmethod
    def _key(row):
        c = row.cfa
        return (c.kind, c.register, c.offset, c.expression, c.deref, c.added, tuple(sorted(row.registers.items())),
                row.ra_signed, row.note)

    def _cached(self, cache, key, make):
        value = cache.get(key)
        if value is None:
            if len(cache) >= ROW_CACHE:
                cache.clear()
            value = cache[key] = make()
        return value

    def text(self, row):
        # Keyed by the identity of the rule objects (shared by the decoder:
        # instructions.register_cfa, _offset_rule), which is cheap to hash;
        # the entry holds those objects, so no id in a key can be reused.
        regs = row.registers
        key = (id(row.cfa), row.ra_signed, row.note, *regs, *map(id, regs.values()))
        hit = self._text.get(key)
        if hit is None:
            if len(self._text) >= ROW_CACHE:
                self._text.clear()
            hit = self._text[key] = (row.text(self.arch), row.cfa, tuple(regs.values()))
        return hit[0]

    def json(self, row):
        base = self._cached(self._json, self._key(row), lambda: row.to_json(self.arch))
        out = dict(base, address=row.address)
        if row.end is not None:
            out["end"] = row.end
        return out


def sources(target, module, address, problems, want=Want.BOTH):
    """The "cfi" sources of a module: every FDE of each section, or those covering address."""
    arch = module.arch
    tables = CfiTables.of(module, target)
    out = []
    for name, section in tables.sections():
        try:
            if address is None:
                fdes = _Stream(section, module.name, problems)
            else:
                hdr = tables.eh_frame_hdr() if section is tables.eh_frame() else None
                fde = section.find_fde(address, hdr)
                fdes = [fde] if fde else []
        except DecodeError as exc:
            problems.append("%s %s: %s" % (module.name, name, exc))
            continue
        if address is not None and not fdes:
            continue
        convert = fde_converter(module.name, arch, address, problems, want)
        out.append({"kind": "cfi", "module": module.name, "section": name,
                    "address": section.region.address,
                    "entries": Entries(fdes, convert, fdes.count if address is None else None)})
    problems.extend("%s %s" % (module.name, p) for p in tables.problems)
    return out


def fde_converter(module_name, arch, address, problems, want=Want.BOTH):
    """A function from an FDE to its entry dict: rows up to a bad instruction,
    which is noted in the entry ("error", "unknown_from") and in problems."""
    render = RowRenderer(arch)
    same_program = _SAME_PROGRAM if want == Want.TEXT and address is None else None

    def convert(fde):
        if same_program is not None:
            return _text_entry(fde, module_name, arch, problems, render, same_program)
        rows, error = cfi.execute_contained(fde, arch)
        if address is not None:
            rows = [r for r in rows if r.address <= address < r.end]
        out = {"start": fde.start, "end": fde.end, "fde_offset": fde.offset,
               "cie_offset": fde.cie.offset, "augmentation": fde.cie.augmentation,
               "signal_frame": fde.cie.signal_frame}
        if want == Want.TEXT:
            out["row_addresses"] = [r.address for r in rows]
        else:
            out["rows"] = [render.json(r) for r in rows]
        out["rows_text"] = [render.text(r) for r in rows]
        return _with_problems(out, fde, module_name, arch, problems, error,
                              rows[-1].end if rows else fde.start)
    return convert


# Text mode: the row texts of FDE programs, shared by every section and file
# a process dumps (`tables FILE...` over a whole system meets the same
# programs in many files).
_SAME_PROGRAM = {}


def _text_entry(fde, module_name, arch, problems, render, same_program):
    """The text-mode entry of fde. FDEs whose CIEs say the same (initial
    instructions, alignment factors, address size, augmentation) with the
    same instruction bytes and the same length have the same rows at the same
    distances from their start (most functions share a few prologue shapes),
    so their row texts are made once; programs whose rows depend on more than
    that (DW_CFA_set_loc, a note or an error naming an offset) are not shared."""
    cie = fde.cie
    key = (arch.name, cie.augmentation, cie.code_align, cie.data_align, cie.address_size, cie.instructions,
           fde.instructions, fde.end - fde.start)
    shared = same_program.get(key)
    if shared is None:
        rows, error = cfi.execute_contained(fde, arch)
        shared = ([r.address - fde.start for r in rows], [render.text(r) for r in rows], error,
                  rows[-1].end - fde.start if rows else 0)
        # DW_CFA_set_loc is opcode 0x01: a program without that byte has none.
        if error is None and not any(r.note for r in rows) and (
                b"\x01" not in fde.instructions or not cfi.uses_set_loc(fde)):
            if len(same_program) >= ROW_CACHE:
                same_program.clear()
            same_program[key] = shared
    deltas, texts, error, last_end = shared
    start = fde.start
    out = {"start": start, "end": fde.end, "fde_offset": fde.offset, "cie_offset": fde.cie.offset,
           "augmentation": fde.cie.augmentation, "signal_frame": fde.cie.signal_frame,
           "row_addresses": [start + d for d in deltas], "rows_text": texts}
    return _with_problems(out, fde, module_name, arch, problems, error, start + last_end if deltas else start)


def _with_problems(out, fde, module_name, arch, problems, error, unknown_from):
    """out with what is wrong with fde (a refused return-address column, a bad instruction), also listed in problems."""
    if fde.cie.ra_register != arch.ra:
        out["refused"] = ra_column_problem(fde.section, fde, arch)
        problems.append("%s %s" % (module_name, out["refused"]))
    if error is not None:
        problems.append("%s %s" % (module_name, error))
        out["error"] = str(error)
        out["unknown_from"] = unknown_from
    return out


def object_file_sources(target, address, problems: list) -> list[dict]:
    """The "cfi" sources of `python -m plugin tables` for a relocatable object.
    With an address: the entries whose offset range holds it (in any section)."""
    module_name = target.name
    out = []
    try:
        own = []
        found = object_file.cfi_sections(target.elf, target.arch, own, target.file_size)
    except object_file.PYELFTOOLS_ERRORS as exc:
        own.append(str(exc) or type(exc).__name__)
        found = []
    problems.extend("%s %s" % (module_name, p) for p in own)
    for item in found:
        fdes = item.section.fdes()
        problems.extend("%s %s" % (module_name, exc) for exc in item.section.bad_entries())
        if address is not None:
            fdes = [f for f in fdes if f.start <= address < f.end]
            if not fdes:
                continue
        convert = fde_converter(module_name, target.arch, address, problems)

        def relative(fde, convert=convert, item=item):
            entry = convert(fde)
            entry["relative_to"] = item.target_of(fde)
            return entry
        out.append({"kind": "cfi", "module": module_name, "section": item.name, "address": 0,
                    "relocatable": True, "entries": Entries(fdes, relative)})
    return out


def entry_text(entry: dict, style=plain) -> Iterator[str]:
    """One FDE's lines for people: its range, then one line per row (as tables.collect gives it)."""
    where = entry.get("relative_to")
    at = (lambda a: style(Styled.ADDRESS, "%s+0x%x" % (where, a) if where else "0x%x" % a))
    fast = style is plain and not where     # the offline text mode: millions of rows
    head = "  [0x%x, 0x%x)" % (entry["start"], entry["end"]) if fast else \
        "  [%s, %s)" % (at(entry["start"]), at(entry["end"]))
    if "fde_offset" in entry:
        head += " FDE at +0x%x, CIE at +0x%x" % (entry["fde_offset"], entry["cie_offset"])
        if entry.get("augmentation"):
            head += ", augmentation %r" % entry["augmentation"]
    yield head
    if entry.get("refused"):
        yield "    not used for unwinding: %s" % entry["refused"]
    addresses = entry["row_addresses"] if "row_addresses" in entry else [r["address"] for r in entry["rows"]]
    if addresses:               # one string for all the rows: a dump has millions of them
        if fast:
            yield "\n".join(["    0x%x: %s" % pair for pair in zip(addresses, entry["rows_text"])])
        else:
            yield "\n".join(["    %s: %s" % (at(address), row_text)
                             for address, row_text in zip(addresses, entry["rows_text"])])
    if entry.get("error"):
        yield "    %s: unknown from here to %s: %s" % (at(entry.get("unknown_from", entry["start"])),
                                                      at(entry["end"]), entry["error"])
