"""`python -m plugin validate FILE [--function NAME|--address A] [--json] [--baseline OLD] [--jobs N]` (one FILE;
several: plugin.validate.many).

Opens FILE as the loader would lay it out, checks each module
(plugin.validate.offline) and prints the verdicts: text, or with --json one
JSON document whose "functions" list is written one record per line as
each function is checked (so a big library shows progress and nothing is
held back), followed by the per-module summary ("modules"). The exit status
is 0 clean, 1 wrong rows found, 2 bad file or arguments. While stderr is a
terminal, a progress line there counts the functions checked.
"""
from __future__ import annotations

import json
import sys
import time

from plugin.errors import guard
from plugin.validate import baseline, offline
from plugin.validate.offline import ModuleReport


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
                lines.extend(_evidence_lines(line))
    for problem in report.problems:
        lines.append("problem: %s" % problem)
    return "\n".join(lines)


def _evidence_lines(line: dict) -> list:
    out = []
    if "entered_by" in line:
        out.append("      entered by the jump at 0x%x, with that jump's frame" % line["entered_by"])
    if "table" in line:
        table = line["table"]
        out.append("      jump table at 0x%x: %d entries read (%s), %d targets followed" % (
            table["address"], table["entries"],
            "bounded by the range check before the jump" if table["bounded"] else "read while they are code",
            table["targets"]))
    return out


class JsonStream:
    """One JSON document: {"functions": [a record per line, as checked], "modules": [...], ...}."""

    def __init__(self, out, known=None):
        self.out = out
        self.known = known
        self.count = 0
        out.write('{"functions": [')

    def function(self, report: ModuleReport, function) -> None:
        record = function.to_json()
        record["module"] = report.module
        if self.known is not None:
            record["disagreements"] = [d for d in record["disagreements"]
                                       if not baseline.is_known(report.module, d, self.known)]
        self.out.write("%s\n%s" % ("," if self.count else "", json.dumps(record)))
        self.out.flush()
        self.count += 1

    def close(self, summary: dict) -> None:
        rest = json.dumps(summary, indent=1)
        self.out.write("\n],%s\n" % rest[1:])


class Progress:
    """A line on stderr, rewritten at most PERIOD seconds apart, while a terminal watches."""
    PERIOD = 0.5

    def __init__(self, err, then=None):
        self.err = err
        self.then = then                # the next on_function (the JSON stream), or None
        self.shown = 0.0
        self.width = 0

    def function(self, report: ModuleReport, function) -> None:
        if self.then is not None:
            self.then(report, function)
        now = time.monotonic()
        if now - self.shown >= self.PERIOD:
            self.shown = now
            line = "validate %s: %d functions, %d instructions checked, %d wrong" % (
                report.module, report.functions, report.instructions,
                sum(s.wrong for s in report.sources.values()))
            self.err.write("\r%-*s" % (self.width, line))
            self.err.flush()
            self.width = len(line)

    def close(self) -> None:
        if self.width:
            self.err.write("\r%s\r" % (" " * self.width))
            self.err.flush()


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
    """The offline command: FILE, --function, --address, --json, --baseline, --jobs. Returns the exit status."""
    from plugin.errors import bad_file_errors
    from plugin.file_targets import load
    from plugin.validate import jobs as parallel
    try:
        import capstone  # noqa: F401
    except ImportError:
        return _fail("validate needs capstone: pip install 'capstone>=5'")
    jobs = getattr(args, "jobs", None)
    if jobs is not None and jobs < 1:
        return _fail("--jobs must be at least 1, not %d" % jobs)
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
        try:
            known = baseline.load(args.baseline)
        except ValueError as exc:
            return _fail(str(exc))
    detail = select is not None
    if jobs is None:
        jobs = 1 if detail else parallel.default_jobs()     # one function: not worth a process
    stream = JsonStream(sys.stdout, known) if args.json else None
    on_function = stream and stream.function
    progress = Progress(sys.stderr, on_function) if sys.stderr.isatty() and not detail else None
    if progress is not None:
        on_function = progress.function
    reports = [offline.validated(target, module, select, detail, jobs, on_function) for module in chosen]
    if progress is not None:
        progress.close()
    damaged = list(getattr(target, "problems", ()))    # the file's own (e.g. relocations not applied)
    reports[0].problems.extend(damaged)
    dropped = sum(baseline.keep_new(r, known) for r in reports) if known is not None else 0
    if stream is not None:
        out = {"modules": [r.to_json() for r in reports]}
        if known is not None:
            out["baseline"] = {"file": args.baseline, "known_not_shown": dropped}
        stream.close(out)
    else:
        print("\n".join(text(r, detail) for r in reports))
        if known is not None:
            print("baseline %s: %d known disagreement(s) not shown; %d new"
                  % (args.baseline, dropped, sum(len(r.disagreements) for r in reports)))
        for module, report in zip(chosen, reports):
            if not module.tables and not report.sources:
                print("%s: no unwind tables (nothing to check)" % module.name)
    return 2 if damaged else 1 if any(r.disagreements for r in reports) else 0


def _fail(message):
    sys.stderr.write("python -m plugin validate: error: %s\n" % message)
    return 2
