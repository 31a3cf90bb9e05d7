"""Every function of a module checked offline: the tables' rows against the instruction analysis.

Every function with a CFI, SFrame or compact entry is analysed from its
instructions (plugin.analysis) and each table's rows are judged against
the analysis at every instruction (plugin.validate.code). The file is laid
out as the loader would (FileTarget), so tables and code are read through
the same paths as in a live debugger. The tables are read by
plugin.validate.sources; `--jobs N` splits the functions over processes
(plugin.validate.jobs); the command line is plugin.validate.command.
"""
from __future__ import annotations

import bisect
import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from plugin import analysis as code_analysis
from plugin.errors import DecodeError, guard
from plugin.formats import cfi
from plugin.strategies.cfi import CfiTables
from plugin.strategies.sframe import SFrameTables
from plugin.validate import code as checks
from plugin.validate import parts, sources


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

    def add(self, function: checks.FunctionReport, keep_detail: bool) -> None:
        """One checked function's counts, verdicts and disagreements."""
        self.functions += 1
        self.instructions += function.instructions
        self.analysed += function.analysed
        self.unknown += len(function.unknown)
        for source, summary in function.sources.items():
            total = self.sources.setdefault(source, checks.SourceSummary())
            for key, value in summary.to_json().items():
                setattr(total, key, getattr(total, key) + value)
        self.disagreements.extend(function.disagreements)
        if keep_detail:
            self.functions_detail.append(detail_json(function))


def detail_json(function: checks.FunctionReport) -> dict:
    return {"start": function.start, "end": function.end, "name": function.name,
            "continuation": function.continuation,
            "unknown": {"0x%x" % a: why for a, why in sorted(function.unknown.items())},
            "instructions": function.detail}


@dataclass
class CheckPlan:
    """What a module's check reads from its tables once, before any function is analysed."""
    arch: object
    fdes: dict
    compact: dict
    sframe: object
    functions: Dict[int, int]
    symbol: Optional[Callable]
    exidx: dict = field(default_factory=dict)
    keep_detail: bool = False


def _plan(target, module, problems: List[str], keep_detail: bool) -> CheckPlan:
    cfi_tables = CfiTables.of(module, target)
    fdes = sources.cfi_entries(cfi_tables, problems)
    problems.extend(cfi_tables.problems)
    sframe_tables = SFrameTables.of(module, target)
    sframe_section = sframe_tables.section()
    problems.extend(sframe_tables.problems)
    functions = {start: fde.end for start, fde in fdes.items()}
    compact = sources.compact_entries(module, target, problems)
    for start, (end, _) in compact.items():
        functions.setdefault(start, end)
    symbol = getattr(target, "symbol", None)
    exidx = sources.exidx_entries(module, target, symbol, problems)
    for start, (end, _) in exidx.items():
        functions.setdefault(start, end)
    starts = sorted(functions)
    with guard(problems, ".sframe"):     # a bad FDE: the functions only SFrame covers are not checked
        for sfde in sframe_section.fdes if sframe_section is not None else ():
            i = bisect.bisect_right(starts, sfde.start) - 1
            inside_cfi = i >= 0 and sfde.start < functions[starts[i]]
            if sfde.end > sfde.start and not inside_cfi:
                functions[sfde.start] = sfde.end    # only SFrame covers it: analysed on its own
    return CheckPlan(module.arch, fdes, compact, sframe_section, functions, symbol, exidx, keep_detail)


def validate_module(target, module, select=None, keep_detail=False, jobs: int = 1,
                    on_function: Optional[Callable] = None) -> ModuleReport:
    """Check every function of module (or those `select(start, end)` accepts), over `jobs`
    processes; on_function(report, FunctionReport) is called as each one is checked."""
    began = time.perf_counter()
    arch = module.arch
    report = ModuleReport(module.name, arch.name)
    if not code_analysis.supported(arch):
        report.problems.append("the instruction analysis supports %s, not %s"
                               % (", ".join(sorted(code_analysis.FACTS)), arch.name))
        return report
    plan = _plan(target, module, report.problems, keep_detail)
    from plugin.validate import orc as orc_rows     # a kernel image's ORC rows, judged row by row
    orc_rows.add_to(report, target, module, select)
    stubs = sources.plt_stubs(module, report.problems)
    got = sources.got_names(target, module.load_bias)
    got_functions = sources.got_functions(target, module.load_bias)
    got_base = sources.got_base(target, module.load_bias)
    symbol = plan.symbol

    def symbol_name(address):
        found = symbol(address | 1 if arch.name == "arm" else address) if symbol else None
        return found[0] if found and (found[1] == address or found[1] == address | 1 and arch.name == "arm") \
            else None

    def add(function, problems):
        report.problems.extend(problems)
        if function is not None:
            report.add(function, keep_detail)
            if on_function is not None:
                on_function(report, function)

    for thumb, subset in code_analysis.instruction_sets(arch, plan.functions, symbol, target.read_memory).items():
        analysis = code_analysis.CodeAnalysis(arch, target.read_memory, sorted(subset.items()),
                                              symbol=symbol_name, got_names=got, stubs=stubs, thumb=thumb,
                                              got_functions=got_functions, got_base=got_base,
                                              lsda={s: f.lsda for s, f in plan.fdes.items() if f.lsda})
        analysis.entry_states.update(sources.table_entries(analysis, plan.fdes, arch))
        analysis.args_size = checks.cfi_args_size(plan.fdes, arch)     # landing pads: the arguments popped
        analysis.decide_noreturn()      # once, before any check or fork: the same answers in any order
        chosen = sorted((s, e) for s, e in subset.items() if select is None or select(s, e))
        check = Checker(plan, analysis)
        if len(chosen) < len(subset) and all(analysis.is_final(start) for start, _ in chosen):
            check_chosen(analysis, chosen, check, add)
        elif jobs > 1:
            from plugin.validate import jobs as parallel
            parallel.check_all(analysis, subset, chosen, check, add, jobs)
        else:
            check_all(analysis, subset, chosen, check, add)
    report.disagreements.sort(key=lambda d: (d.address, d.source))
    report.functions_detail.sort(key=lambda f: f["start"])
    report.seconds = time.perf_counter() - began
    return report


def check_all(analysis, functions, chosen, check, add) -> None:
    """Check each chosen function as soon as its analysis is final, then drop its states (memory);
    the parts jumps enter (.cold parts) are checked last, with those jumps' frames (plugin.validate.parts)."""
    wanted = dict(chosen)
    continuations = {}
    for start, end in sorted(functions.items()):
        if not analysis.is_final(start):
            continue
        result = analysis.function(start, end)
        if start in wanted:
            add(*check(start, end))
        continuations[start] = analysis.continuation_exits(result)
        analysis.forget_states(start)
    pending = {s: e for s, e in functions.items() if not analysis.is_final(s)}
    checked = parts.settle(pending, continuations,
                           lambda tasks: [parts.run_part(analysis, check, wanted, *task) for task in tasks])
    for start, _ in chosen:
        if checked.get(start) is not None:
            add(*checked[start])


def check_chosen(analysis, chosen, check, add) -> None:
    """Check only the chosen functions (--function, --address), none of them a .cold part: a
    function entered by calls is analysed from its own code and the callees' facts, which
    decide_noreturn fixed, so its verdicts are those of the whole module's check. The other
    functions matter only to the parts their jumps enter (check_all)."""
    for start, end in chosen:
        analysis.function(start, end)
        add(*check(start, end))
        analysis.forget_states(start)


class Checker:
    """check(start, end) -> (FunctionReport or None, problems): one function's rows judged."""

    def __init__(self, plan: CheckPlan, analysis):
        self.plan = plan
        self.analysis = analysis
        self.cfi_rows = sources.RowCursor()

    def __call__(self, start: int, end: int):
        plan, analysis = self.plan, self.analysis
        problems: List[str] = []
        tables = {}
        fde = plan.fdes.get(start)
        if fde is not None:
            try:
                self.cfi_rows.use(fde.offset, cfi.execute(fde, plan.arch))
                tables["cfi"] = self.cfi_rows.at
            except DecodeError as exc:
                problems.append("FDE at 0x%x: %s" % (fde.offset, exc))
        if plan.sframe is not None:
            tables["sframe"] = sources.sframe_rows(plan.sframe, problems)
        if start in plan.compact:
            tables["compact"] = sources.compact_rows(start, plan.compact[start][1], analysis, plan.arch,
                                                     problems)
        if start in plan.exidx:
            tables["exidx"] = sources.exidx_rows(start, plan.exidx[start][1], analysis, plan.arch)
        name = sources.function_name(plan.symbol, start, plan.arch.name == "arm")
        try:
            function = checks.check_function(analysis, start, end, name, tables, analysis.facts, plan.arch,
                                             plan.keep_detail)
        except DecodeError as exc:
            problems.append("%s: %s" % (name, exc))
            return None, problems
        function.continuation = analysis.is_continuation(start)
        return function, problems


YOUNG_OBJECTS = 10000000      # allocations between collections of the youngest objects while validating


@contextmanager
def fewer_collections():
    """The analysis makes millions of small tuples and dicts that die young and form no cycles;
    Python's collector, run every 700 allocations by default, walks them all: a fifth of the CPU
    time (python3.11: 19.4 s, 16.3 s with 50,000; tests/bench/bench_validate.py). A function's
    states live until it is checked: with a window far longer than one function's allocations
    few of them are still alive when it is collected, to be walked again as older objects
    (python3.11: 0.74 s of collections with 50,000, 0.33 s with 1,000,000, 0.15 s with 10,000,000,
    most of it the one collection after this; the same peak memory: a collection after checking
    libc.so.6 with none during finds 437 objects in cycles). Restored after."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def validated(target, module, select, detail, jobs: int = 1, on_function=None) -> ModuleReport:
    """validate_module under plugin.errors.guard: what a damaged file raises past the
    checks' own handling is one problem of the module's report, not a traceback."""
    problems = []
    with guard(problems, module.name), fewer_collections():
        return validate_module(target, module, select, keep_detail=detail, jobs=jobs, on_function=on_function)
    report = ModuleReport(module.name, module.arch.name)
    report.problems.extend(problems)
    return report
