"""`python -m plugin validate FILE [--function NAME|--address A] [--json]`.

Every function with a CFI or SFrame entry in FILE is analysed from its
instructions (plugin.analysis) and each table's rows are judged against
the analysis at every instruction (plugin.validate.code). The file is laid
out as the loader would (FileTarget), so tables and code are read through
the same paths as in a live debugger.
"""
from __future__ import annotations

import bisect
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from plugin import analysis as code_analysis
from plugin.analysis import rows as arows
from plugin.errors import DecodeError, guard
from plugin.formats import cfi
from plugin.modules import on_disk
from plugin.analysis.ops import Flow
from plugin.strategies import compact as compact_strategy
from plugin.strategies.cfi import CfiTables
from plugin.strategies.compact import CompactTables
from plugin.strategies.sframe import SFrameTables
from plugin.validate import code as checks
from plugin.validate.live import EXACT_ONLY_AT

PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".iplt")


@dataclass
class ModuleReport:
    module: str
    arch: str
    functions: int = 0
    instructions: int = 0
    analysed: int = 0
    unknown: int = 0
    sources: Dict[str, checks.SourceSummary] = field(default_factory=dict)
    disagreements: List[checks.Disagreement] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    seconds: float = 0.0
    functions_detail: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"module": self.module, "arch": self.arch, "functions": self.functions,
                "instructions": self.instructions, "analysed": self.analysed, "unknown": self.unknown,
                "sources": {k: v.to_json() for k, v in self.sources.items()},
                "disagreements": [d.to_json() for d in self.disagreements],
                "problems": self.problems, "seconds": round(self.seconds, 3),
                "functions_detail": self.functions_detail}


class _Rows:
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


def _cfi_entries(tables, problems):
    out = {}
    for name, section in tables.sections():
        try:
            for fde in section.fdes():
                if fde.end > fde.start and fde.start not in out:
                    out[fde.start] = fde
        except DecodeError as exc:
            problems.append("%s: %s" % (name, exc))
    return out


def _got_names(target, bias):
    """GOT slot address -> symbol name, from the file's relocations (to name PLT stubs)."""
    names = {}
    elf = getattr(target, "elf", None)
    if elf is None:
        return names
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection
    lost = []       # a damaged section table or relocation section only loses stub names
    with guard(lost, "relocations"):
        for section in elf.iter_sections():
            if not isinstance(section, RelocationSection) or section.name not in (".rela.plt", ".rela.dyn"):
                continue
            symbols = elf.get_section(section["sh_link"])
            for reloc in section.iter_relocations() if isinstance(symbols, SymbolTableSection) else ():
                if reloc["r_info_sym"]:
                    names[bias + reloc["r_offset"]] = symbols.get_symbol(reloc["r_info_sym"]).name
    return names


def validate_module(target, module, select=None, keep_detail=False) -> ModuleReport:
    """Check every function of module (or those `select(start, end)` accepts)."""
    began = time.perf_counter()
    arch = module.arch
    report = ModuleReport(module.name, arch.name)
    if not code_analysis.supported(arch):
        report.problems.append("the instruction analysis supports %s, not %s"
                               % (", ".join(sorted(code_analysis.FACTS)), arch.name))
        return report
    cfi_tables = CfiTables.of(module, target)
    fdes = _cfi_entries(cfi_tables, report.problems)
    report.problems.extend(cfi_tables.problems)
    sframe_tables = SFrameTables.of(module, target)
    sframe_section = sframe_tables.section()
    report.problems.extend(sframe_tables.problems)
    functions = {start: fde.end for start, fde in fdes.items()}
    compact = _compact_entries(module, target, report.problems)
    for start, (end, _) in compact.items():
        functions.setdefault(start, end)
    starts = sorted(functions)
    with guard(report.problems, ".sframe"):     # a bad FDE: the functions only SFrame covers are not checked
        for sfde in sframe_section.fdes if sframe_section is not None else ():
            i = bisect.bisect_right(starts, sfde.start) - 1
            inside_cfi = i >= 0 and sfde.start < functions[starts[i]]
            if sfde.end > sfde.start and not inside_cfi:
                functions[sfde.start] = sfde.end    # only SFrame covers it: analysed on its own
    bias = module.load_bias
    stubs = []
    with guard(report.problems, "section headers (PLT stubs are not named)"):
        for name, header in on_disk.sections(module.path).items() if module.format == "elf" else ():
            if name in PLT_SECTIONS and header.size:
                stubs.append((header.address + bias, header.address + bias + header.size))
    symbol = getattr(target, "symbol", None)

    def symbol_name(address):
        found = symbol(address | 1 if arch.name == "arm" else address) if symbol else None
        return found[0] if found and (found[1] == address or found[1] == address | 1 and arch.name == "arm") \
            else None

    for thumb, subset in code_analysis.instruction_sets(arch, functions, symbol).items():
        analysis = code_analysis.CodeAnalysis(arch, target.read_memory, sorted(subset.items()),
                                              symbol=symbol_name, got_names=_got_names(target, bias),
                                              stubs=stubs, thumb=thumb,
                                              lsda={s: f.lsda for s, f in fdes.items() if f.lsda})
        analysis.entry_states.update(_table_entries(analysis, fdes, arch))
        chosen = sorted((s, e) for s, e in subset.items() if select is None or select(s, e))
        check = _checker(report, analysis, fdes, compact, sframe_section, symbol, arch, keep_detail)
        _check_all(analysis, subset, chosen, check)
    report.disagreements.sort(key=lambda d: (d.address, d.source))
    report.functions_detail.sort(key=lambda f: f["start"])
    report.seconds = time.perf_counter() - began
    return report


def _check_all(analysis, functions, chosen, check):
    """Check each chosen function as soon as its analysis is final, then drop its states (memory);
    the parts a jump may still re-enter (.cold parts) wait for analyse_continuations()."""
    wanted = dict(chosen)
    done = set()
    for start, end in sorted(functions.items()):
        analysis.function(start, end)
        if not analysis.is_final(start):
            continue
        if start in wanted:
            check(start, end)
            done.add(start)
        analysis.forget_states(start)
    analysis.analyse_continuations()
    for start, end in chosen:
        if start not in done:
            check(start, end)


def _checker(report, analysis, fdes, compact, sframe_section, symbol, arch, keep_detail):
    """check(start, end): one function's rows judged and added to report."""
    cfi_rows = _Rows()
    facts = analysis.facts

    def check(start, end):
        tables = {}
        fde = fdes.get(start)
        if fde is not None:
            try:
                cfi_rows.use(fde.offset, cfi.execute(fde, arch))
                tables["cfi"] = cfi_rows.at
            except DecodeError as exc:
                report.problems.append("FDE at 0x%x: %s" % (fde.offset, exc))
        if sframe_section is not None:
            tables["sframe"] = _sframe_rows(sframe_section, report.problems)
        if start in compact:
            tables["compact"] = _compact_rows(start, compact[start][1], analysis, arch, report.problems)
        name = _function_name(symbol, start)
        try:
            function = checks.check_function(analysis, start, end, name, tables, facts, arch, keep_detail)
        except DecodeError as exc:
            report.problems.append("%s: %s" % (name, exc))
            return
        report.functions += 1
        report.instructions += function.instructions
        report.analysed += function.analysed
        report.unknown += len(function.unknown)
        for source, summary in function.sources.items():
            total = report.sources.setdefault(source, checks.SourceSummary())
            for key, value in summary.to_json().items():
                setattr(total, key, getattr(total, key) + value)
        report.disagreements.extend(function.disagreements)
        if keep_detail:
            report.functions_detail.append({
                "start": start, "end": end, "name": name,
                "continuation": analysis.is_continuation(start),
                "unknown": {"0x%x" % a: why for a, why in sorted(function.unknown.items())},
                "instructions": function.detail})
    return check


def _table_entries(analysis, fdes, arch):
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


def _compact_entries(module, target, problems):
    """{start: (end, (UnwindInfo, Entry))} of a Mach-O module's compact entries that are not DWARF escapes
    (those are the CFI's rows, checked as such)."""
    if module.format != "macho":
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


def _compact_rows(start, found, analysis, arch, problems):
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


def _sframe_rows(section, problems):
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


def _function_name(symbol, address):
    found = symbol(address) if symbol else None
    if found is None:
        return "0x%x" % address
    name, start = found
    return name if start == address else "%s+0x%x" % (name, address - start)


def text(report: ModuleReport, detail=False) -> str:
    lines = ["%s (%s): %d functions, %d instructions, %d analysed, %d unknown (%.1f%%), %.2f s" % (
        report.module, report.arch, report.functions, report.instructions, report.analysed,
        report.unknown, 100.0 * report.unknown / max(report.instructions, 1), report.seconds)]
    for source, summary in sorted(report.sources.items()):
        lines.append("  %s: %d instructions checked: %d right, %d wrong, %d undecided" % (
            source, summary.checked, summary.right, summary.wrong, summary.unknown))
    for d in report.disagreements:
        lines.append("DISAGREE %s 0x%x %s: %s" % (d.source, d.address, d.function, d.instruction))
        lines.append("    table:    %s" % d.row)
        lines.append("    analysis: %s" % d.analysis)
        for f in d.findings:
            lines.append("    %s: table says %s, code says %s (%s)" % (f.item, f.table, f.analysis, f.detail))
    if detail:
        for function in report.functions_detail:
            lines.append("%s [0x%x, 0x%x)%s" % (function["name"], function["start"], function["end"],
                                                " (entered by a jump from another function's frame)"
                                                if function["continuation"] else ""))
            for line in function["instructions"]:
                verdicts = " ".join("%s:%s" % (s, v["verdict"]) for s, v in sorted(line["sources"].items()))
                lines.append("  0x%x  %-40s %s  [%s]" % (line["address"], line["instruction"],
                                                         line["analysis"], verdicts))
    for problem in report.problems:
        lines.append("problem: %s" % problem)
    return "\n".join(lines)


def _selector(target, args):
    if args.address is not None:
        return (lambda s, e: s <= args.address < e), None
    if args.function is not None:
        starts, problems = set(), []
        with guard(problems, "its symbols cannot be read"):
            starts = _symbol_starts(target, args.function)
        if not starts:
            return None, "no function named %r in %s%s" % (args.function, args.file, "".join("; " + p for p in problems))
        return (lambda s, e: any(s <= a < e for a in starts)), None
    return None, None


def _symbol_starts(target, name):
    elf = getattr(target, "elf", None)
    starts = set()
    if elf is None and hasattr(target, "_symbol_table"):     # Mach-O: names kept without the leading '_'
        wanted = {name, name[1:] if name.startswith("_") else name}
        return {start for start, _end, known in target._symbol_table()[1] if known in wanted}
    for section_name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(section_name) if elf is not None else None
        if section is None:
            continue
        for sym in section.iter_symbols():
            if sym.name == name and sym["st_value"]:
                starts.add(target.bias + sym["st_value"])
    return starts


def run(args) -> int:
    """The offline command: FILE, --function, --address, --json. Returns the exit status."""
    from plugin.errors import bad_file_errors
    from plugin.targets import load
    try:
        import capstone  # noqa: F401
    except ImportError:
        return _fail("validate needs capstone: pip install 'capstone>=5'")
    try:
        target, modules = load(args.file)
    except bad_file_errors() as exc:
        return _fail("cannot open %s: %s" % (args.file, getattr(exc, "strerror", None) or exc))
    chosen = modules.all()
    if target.header_address is None and not chosen:        # an object file: its sections
        chosen = [target.section_module()]
    if not chosen:
        return _fail("%s: no module found (%s)" % (args.file, "; ".join(r for _, r in modules.failed)))
    select, error = _selector(target, args)
    if error:
        return _fail(error)
    known = None
    if getattr(args, "baseline", None):
        from plugin.validate import baseline
        try:
            known = baseline.load(args.baseline)
        except ValueError as exc:
            return _fail(str(exc))
    detail = select is not None
    reports = [_validated(target, module, select, detail) for module in chosen]
    damaged = list(getattr(target, "problems", ()))    # the file's own (e.g. relocations not applied)
    reports[0].problems.extend(damaged)
    dropped = sum(baseline.keep_new(r, known) for r in reports) if known is not None else 0
    if args.json:
        out = {"modules": [r.to_json() for r in reports]}
        if known is not None:
            out["baseline"] = {"file": args.baseline, "known_not_shown": dropped}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(text(r, detail) for r in reports))
        if known is not None:
            print("baseline %s: %d known disagreement(s) not shown; %d new"
                  % (args.baseline, dropped, sum(len(r.disagreements) for r in reports)))
        for module in chosen:
            if not module.tables:
                print("%s: no unwind tables (nothing to check)" % module.name)
    return 2 if damaged else 1 if any(r.disagreements for r in reports) else 0


def _validated(target, module, select, detail) -> ModuleReport:
    """validate_module under plugin.errors.guard: what a damaged file raises past the
    checks' own handling is one problem of the module's report, not a traceback."""
    problems = []
    with guard(problems, module.name):
        return validate_module(target, module, select, keep_detail=detail)
    report = ModuleReport(module.name, module.arch.name)
    report.problems.extend(problems)
    return report


def _fail(message):
    sys.stderr.write("python -m plugin validate: error: %s\n" % message)
    return 2
