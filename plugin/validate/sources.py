"""What each table of a module says, in the shape the offline check asks for.

The offline check (plugin.validate.offline) walks functions; this module
finds them in the tables (CFI FDEs, Mach-O compact entries, SFrame FDEs)
and gives, per function and source, a callable pc -> the table's Row in
force at pc (or None). It also finds what the analysis needs from the file
around the tables: PLT stub ranges, GOT slot names, and the entry state of
functions a table says are not entered by a call.
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Tuple

from plugin.analysis import rows as arows
from plugin.analysis.ops import Flow
from plugin.errors import DecodeError, guard
from plugin.formats import cfi
from plugin.modules import on_disk
from plugin.modules.module import ModuleFormat
from plugin.strategies import compact as compact_strategy
from plugin.strategies.compact import CompactTables
from plugin.validate.live import EXACT_ONLY_AT

PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".iplt")
RELOCATIONS_NAMING_SLOTS = (".rela.plt", ".rela.dyn", ".rel.plt", ".rel.dyn")    # RELA: x86_64, aarch64; REL: i386, Arm
EXIDX_EXACT_AT = (Flow.CALL,)   # EHABI opcodes describe a function's body where it calls


class RowCursor:
    """The row in force at a pc, for one source, computed once per table entry."""

    def __init__(self):
        self._entry = None
        self._rows = []
        self._starts = []

    def use(self, key, rows):
        if key != self._entry:
            self._entry, self._rows = key, rows
            self._starts = [row.address for row in rows]

    def at(self, pc):
        i = bisect.bisect_right(self._starts, pc) - 1
        if i >= 0 and pc < self._rows[i].end:
            return self._rows[i]
        return None


def cfi_entries(tables, problems: List[str]) -> dict:
    """{start: FDE} of every non-empty FDE (the first one of a start wins)."""
    out = {}
    for name, section in tables.sections():
        try:
            for fde in section.fdes():
                if fde.end > fde.start and fde.start not in out:
                    out[fde.start] = fde
        except DecodeError as exc:
            problems.append("%s: %s" % (name, exc))
    return out


def got_names(target, bias: int) -> Dict[int, str]:
    """GOT slot address -> symbol name, from the file's relocations (to name PLT stubs)."""
    return {slot: symbol.name for slot, symbol in _slot_symbols(target, bias)}


def got_functions(target, bias: int) -> Dict[int, int]:
    """GOT slot address -> the address of the function its symbol names where the module defines it
    (STT_FUNC, not undefined): a PLT stub's callee whose code the analysis can read."""
    out = {}
    for slot, symbol in _slot_symbols(target, bias):
        if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_shndx"] != "SHN_UNDEF" and symbol["st_value"]:
            out[slot] = bias + symbol["st_value"]
    return out


def got_base(target, bias: int) -> Optional[int]:
    """The GOT's address as i386 PIC code sees it in ebx (_GLOBAL_OFFSET_TABLE_: DT_PLTGOT,
    else the start of .got.plt); None for a file without one."""
    elf = getattr(target, "elf", None)
    if elf is None:
        return None
    lost = []
    with guard(lost, "dynamic section"):
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_DYNAMIC":
                for tag in section.iter_tags("DT_PLTGOT"):
                    return bias + tag["d_ptr"]
        found = elf.get_section_by_name(".got.plt")
        if found is not None:
            return bias + found["sh_addr"]
    return None


def _slot_symbols(target, bias: int) -> List[Tuple[int, object]]:
    """(GOT slot address, symbol) of every relocation naming a slot (PLT and dynamic relocations)."""
    out = []
    elf = getattr(target, "elf", None)
    if elf is None:
        return out
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection
    lost = []       # a damaged section table or relocation section only loses stub names
    with guard(lost, "relocations"):
        for section in elf.iter_sections():
            if not isinstance(section, RelocationSection) or section.name not in RELOCATIONS_NAMING_SLOTS:
                continue
            symbols = elf.get_section(section["sh_link"])
            for reloc in section.iter_relocations() if isinstance(symbols, SymbolTableSection) else ():
                if reloc["r_info_sym"]:
                    out.append((bias + reloc["r_offset"], symbols.get_symbol(reloc["r_info_sym"])))
    return out


def plt_stubs(module, problems: List[str]) -> List[Tuple[int, int]]:
    """The (start, end) ranges of the module's PLT sections, as loaded."""
    stubs = []
    bias = module.load_bias
    with guard(problems, "section headers (PLT stubs are not named)"):
        for name, header in on_disk.sections(module.path).items() if module.format == ModuleFormat.ELF else ():
            if name in PLT_SECTIONS and header.size:
                stubs.append((header.address + bias, header.address + bias + header.size))
    return stubs


def table_entries(analysis, fdes, arch):
    """{start: (address, State or None)} for functions whose table says they are not entered by a call.

    Leading nops are skipped: GCC starts an FDE with one when its first
    real instruction is a landing pad (a pad at offset 0 would read as "no
    pad"), and the row after the nop is the pad's frame; glibc's i386
    `_dl_runtime_resolve` FDE starts at the `lea esi, [esi]` padding before it.
    """
    facts = analysis.facts
    out = {}
    for start, fde in fdes.items():
        address = start
        insn = analysis.decode_at(start)
        while insn is not None and facts.is_padding(insn.text) and insn.end < fde.end:
            address = insn.end
            insn = analysis.decode_at(address)
        try:
            first = cfi.row_at(fde, address, arch)
        except DecodeError:
            continue
        if first is not None and not arows.is_abi_entry(first, facts):
            out[start] = (address, arows.entry_from_row(first, facts))
    return out


def compact_entries(module, target, problems: List[str]) -> dict:
    """{start: (end, (UnwindInfo, Entry))} of a Mach-O module's compact entries that are not DWARF escapes
    (those are the CFI's rows, checked as such)."""
    if module.format != ModuleFormat.MACHO:
        return {}
    tables = CompactTables.of(module, target)
    ui = tables.unwind_info()
    problems.extend(tables.problems)
    out = {}
    if ui is None:
        return out
    starts = getattr(target, "function_starts", list)()
    try:
        for start, end, encoding in ui.entries():
            if ui.decode(encoding).mode in ("NONE", "DWARF", "UNKNOWN"):
                continue
            # The linker folds neighbours with one opcode into one entry: one function per symbol.
            inside = [a for a in starts[bisect.bisect_right(starts, start):bisect.bisect_left(starts, end)]]
            for first, last in zip([start] + inside, inside + [end]):
                out[first] = (last, (ui, ui.lookup(start), tables))
    except DecodeError as exc:
        problems.append("%s: %s" % (compact_strategy.SECTION, exc))
    return out


def compact_rows(start, found, analysis, arch, problems: List[str]):
    """The opcode's row where it claims to be exact (plugin.validate.live.EXACT_ONLY_AT): at calls,
    and the ABI's rule at the function's entry (start) and at returns, as the compact source does."""
    ui, entry, tables = found
    kinds = EXACT_ONLY_AT["compact"]
    cache = {}

    def at(pc):
        insn = analysis.decode_at(pc)
        if pc != start and (insn is None or insn.flow not in kinds):
            return None
        if pc == start or insn.flow == Flow.RET:
            return compact_strategy.entry_row(arch, pc)
        if "row" not in cache:
            try:
                cache["row"] = ui.row(entry, read_code=tables.read_code)
            except DecodeError as exc:
                problems.append("compact entry at 0x%x: %s" % (entry.function_start, exc))
                cache["row"] = None
        return cache["row"]
    return at


def exidx_entries(module, target, symbol, problems: List[str]) -> dict:
    """{start: (end, OpcodeRun)} of an Arm module's .ARM.exidx entries whose opcodes can be run
    (not EXIDX_CANTUNWIND, a known personality, no refusal)."""
    if module.arch.name != "arm":
        return {}
    from plugin.formats import exidx
    from plugin.strategies.exidx import ExidxTables
    tables = ExidxTables.of(module, target)
    table = tables.table()
    problems.extend(tables.problems)
    out = {}
    if table is None:
        return out
    lookup = symbol or (lambda address: None)
    try:
        for entry in table.entries():
            if entry.kind == exidx.EntryKind.CANTUNWIND:
                continue
            try:
                _, steps = tables.planned(entry, lookup)
            except DecodeError as exc:
                problems.append("%s entry %d: %s" % (exidx.INDEX_SECTION, entry.index, exc))
                continue
            if steps is not None and not steps.refused:
                out[entry.function & ~1] = (tables.end_of(entry), steps)
    except DecodeError as exc:
        problems.append("%s: %s" % (exidx.INDEX_SECTION, exc))
    return out


def exidx_rows(start, steps, analysis, arch):
    """EHABI opcodes describe the body at call sites: the opcodes' row at calls, the entry rule
    (CFA = sp, return address in lr) at the function's first instruction; elsewhere no claim."""
    from plugin.strategies.exidx_plan import at_entry
    entry_row = at_entry(None, arch, start).row

    def at(pc):
        if pc == start:
            return entry_row
        insn = analysis.decode_at(pc)
        return steps.row if insn is not None and insn.flow in EXIDX_EXACT_AT else None
    return at


def sframe_rows(section, problems: List[str]):
    cache = {}

    def at(pc):
        if pc not in cache:
            try:
                found = section.find(pc)
                cache[pc] = None if found is None else section.row(found[1], found[2], pc)
            except (DecodeError, ValueError) as exc:
                problems.append("SFrame at 0x%x: %s" % (pc, exc))
                cache[pc] = None
        return cache[pc]
    return at


def function_name(symbol, address: int, arm: bool = False) -> str:
    """The function at address by its symbol (name+offset inside one). arm: 32-bit Arm, whose Thumb
    functions' symbols have bit 0 set (looked up as offline.py's symbol_name looks them up)."""
    found = symbol(address | 1 if arm else address) if symbol else None
    if found is None:
        return "0x%x" % address
    name, start = found
    start = start & ~1 if arm else start
    return name if start == address else "%s+0x%x" % (name, address - start)
