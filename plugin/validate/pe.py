"""`python -m plugin validate FILE.exe|FILE.dll`: the `pdata` rows of a PE image judged
against its instructions, as plugin.validate.offline judges CFI and SFrame.

The file is laid out at its ImageBase (plugin.file_targets.pe), its module found from
the headers in that memory, and every function with a .pdata entry analysed from its
instructions (plugin.analysis; x64 and ARM64). At every instruction the row the
`pdata` source gives there (plugin.strategies.pdata.static_row: Windows' rules, the
prolog by offsets, epilogues read from the code) is compared with the analysis by
plugin.validate.code: the CFA, the return address and the saved non-volatile
registers. A chained x64 piece or an ARM64 Flag=2 fragment is not entered by a call:
its analysis starts from the table's own row at its start.
"""
from __future__ import annotations

import json
import sys
import time

from plugin import analysis as code_analysis
from plugin.analysis import rows as arows
from plugin.errors import DecodeError, MemoryReadError, bad_file_errors, guard
from plugin.formats import pdata_arm64 as a64
from plugin.formats import pdata_x64 as x64
from plugin.modules import discover
from plugin.strategies.pdata import PdataTables, static_row
from plugin.validate import code as checks
from plugin.validate.command import text
from plugin.validate.offline import ModuleReport

SOURCE = "pdata"
# Non-volatile under the Windows x64 ABI but not under the System V one the analysis'
# facts describe: kept across calls, tracked from entry and judged too: rsi, rdi and
# xmm6-xmm15 (DWARF 4, 5 and 23-32). xmm0-xmm5 (17-22) are volatile: changed by a call.
WINDOWS_ONLY = {"x86_64": (4, 5) + tuple(range(23, 33))}
WINDOWS_VOLATILE = {"x86_64": tuple(range(17, 23))}


class WindowsFacts:
    """An architecture's analysis facts with the Windows ABI's non-volatile registers."""

    def __init__(self, facts, extra, volatile=()):
        self._facts = facts
        self.CALLEE_SAVED = tuple(facts.CALLEE_SAVED) + tuple(r for r in extra if r not in facts.CALLEE_SAVED)
        self.CALL_CLOBBERED = tuple(r for r in facts.CALL_CLOBBERED if r not in extra) + tuple(volatile)

    def __getattr__(self, name):
        return getattr(self._facts, name)


def functions_of(tables: PdataTables) -> dict:
    """{start: (end, entered by a call)} of every .pdata entry (chained pieces and fragments
    are not entered by a call)."""
    base, out = tables.image_base, {}
    for entry in tables.entries() or ():
        if tables.module.arch.name == "aarch64":
            length = entry.packed.function_length if entry.packed is not None else \
                a64.read_xdata(tables.read_rva, entry.xdata).function_length if entry.xdata is not None else 0
            out[base + entry.begin] = (base + entry.begin + length, entry.flag != a64.PdataFlag.FRAGMENT)
        else:
            first = x64.read_unwind_info(tables.read_rva, entry.unwind_info)
            out[base + entry.begin] = (base + entry.end, first.chained is None)
    return out


def validate_pe(target, module, select=None, keep_detail=False) -> ModuleReport:
    began = time.perf_counter()
    arch = module.arch
    report = ModuleReport(module.name, arch.name)
    if not code_analysis.supported(arch):
        report.problems.append("the instruction analysis does not support %s" % arch.name)
        return report
    tables = PdataTables.of(module, target)
    functions = {}
    with guard(report.problems, ".pdata"):
        functions = functions_of(tables)
    report.problems.extend(tables.problems)

    def name_of(address):
        found = target.symbol(address)
        return found[0] if found and found[1] == address else None

    analysis = code_analysis.CodeAnalysis(arch, target.read_memory,
                                          sorted((s, e) for s, (e, _) in functions.items()), symbol=name_of)
    facts = analysis.facts = WindowsFacts(analysis.facts, WINDOWS_ONLY.get(arch.name, ()),
                                          WINDOWS_VOLATILE.get(arch.name, ()))
    for start, (end, called) in functions.items():
        if not called:
            with guard(report.problems, "the row at 0x%x" % start):
                row = static_row(tables, start)
                analysis.entry_states[start] = (start, arows.entry_from_row(row, facts) if row else None)

    def at(pc):
        try:
            return static_row(tables, pc)
        except (DecodeError, MemoryReadError) as exc:
            report.problems.append("0x%x: %s" % (pc, exc))
            return None
    for start, (end, _) in sorted(functions.items()):
        if select is not None and not select(start, end):
            continue
        name = name_of(start) or "0x%x" % start
        try:
            function = checks.check_function(analysis, start, end, name, {SOURCE: at}, facts, arch, keep_detail)
        except DecodeError as exc:
            report.problems.append("%s: %s" % (name, exc))
            continue
        _add(report, function, analysis, keep_detail)
    report.disagreements.sort(key=lambda d: (d.address, d.source))
    report.seconds = time.perf_counter() - began
    return report


def _add(report: ModuleReport, function, analysis, keep_detail: bool) -> None:
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
            "start": function.start, "end": function.end, "name": function.name,
            "continuation": analysis.is_continuation(function.start),
            "notes": {"0x%x" % a: why for a, why in sorted(analysis.function(function.start).notes.items())},
            "unknown": {"0x%x" % a: why for a, why in sorted(function.unknown.items())},
            "instructions": function.detail})


def run(args) -> int:
    """validate FILE for a PE file: exit 0 all rows right, 1 some wrong, 2 the file cannot be used."""
    from plugin.file_targets.pe import PeFileTarget
    try:
        import capstone  # noqa: F401
    except ImportError:
        return _fail("validate needs capstone: pip install 'capstone>=5'")
    known = None
    if getattr(args, "baseline", None):
        from plugin.validate import baseline
        try:
            known = baseline.load(args.baseline)
        except ValueError as exc:
            return _fail(str(exc))
    try:
        target = PeFileTarget(args.file)
        module = discover(target, target.modules()[0])
    except bad_file_errors() + (DecodeError, MemoryReadError) as exc:
        return _fail("cannot open %s: %s" % (args.file, getattr(exc, "strerror", None) or exc))
    select = None
    if args.address is not None:
        select = (lambda s, e: s <= args.address < e)
    elif args.function is not None:
        starts = {start for start, _end, name in target._symbol_table()[1] if name == args.function}
        if not starts:
            return _fail("no function named %r in %s" % (args.function, args.file))
        select = (lambda s, e: any(s <= a < e for a in starts))
    detail = select is not None
    report = validate_pe(target, module, select, detail)
    dropped = baseline.keep_new(report, known) if known is not None else 0
    if args.json:
        out = {"modules": [report.to_json()]}
        if known is not None:
            out["baseline"] = {"file": args.baseline, "known_not_shown": dropped}
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(text(report, detail))
        if known is not None:
            print("baseline %s: %d known disagreement(s) not shown; %d new"
                  % (args.baseline, dropped, len(report.disagreements)))
    return 1 if report.disagreements else 0


def _fail(message: str) -> int:
    sys.stderr.write("python -m plugin validate: error: %s\n" % message)
    return 2
