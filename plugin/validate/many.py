"""`python -m plugin validate FILE FILE...`: several files, spread over `--jobs N` processes.

Each file is checked as `validate FILE --jobs 1` would check it, in a
process of its own (forked; one per file, so a large file's memory goes
with it), at most N at a time; the outputs are printed in the order the
files were given, each as soon as it and every file before it are done, so
one process and N give the same output. Text: each file's report under a
`File: FILE` heading; --json: one document {"files": [{"file", "status",
"report": the file's own --json document or null}, ...]}. A file that cannot
be checked says why on stderr and counts as status 2. The exit status is
the worst of the files'. While stderr is a terminal a progress line counts
the files done.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import sys
from typing import Callable, List, Tuple

from plugin.validate import jobs as parallel

Outcome = Tuple[str, int, str, str]          # (file, exit status, stdout, stderr)


def run(args: argparse.Namespace, one: Callable[[argparse.Namespace], int]) -> int:
    """args.file: the paths; one(args) checks a single file (args.file one path) and returns its status."""
    if args.address is not None:
        return _fail("--address takes one FILE (%d given): an address belongs to one file" % len(args.file))
    jobs = args.jobs if args.jobs is not None else parallel.default_jobs()
    if jobs < 1:
        return _fail("--jobs must be at least 1, not %d" % jobs)
    tasks = [(one, _single(args, path)) for path in args.file]
    watching = sys.stderr.isatty()
    worst = 0
    if args.json:
        sys.stdout.write('{"files": [')
    for n, (path, status, out, err) in enumerate(_outcomes(tasks, jobs)):
        worst = max(worst, status)
        if err:
            sys.stderr.write(("\r" if watching else "") + err)
        if args.json:
            report = out.strip() or "null"
            sys.stdout.write('%s\n{"file": %s, "status": %d, "report": %s}'
                             % ("," if n else "", json.dumps(path), status, report))
        else:
            sys.stdout.write("%sFile: %s\n%s" % ("\n" if n else "", path, out))
        sys.stdout.flush()
        if watching:
            sys.stderr.write("\rvalidate: %d of %d files done" % (n + 1, len(tasks)))
            sys.stderr.flush()
    if watching:
        sys.stderr.write("\r%s\r" % (" " * 40))
    if args.json:
        sys.stdout.write("\n]}\n")
    return worst


def _single(args: argparse.Namespace, path: str) -> argparse.Namespace:
    single = argparse.Namespace(**vars(args))
    single.file, single.jobs = path, 1
    return single


def _outcomes(tasks: List[tuple], jobs: int):
    """Each file's outcome, in the order given."""
    if jobs == 1 or len(tasks) == 1 or not parallel.can_fork():
        for task in tasks:
            yield check(task)
        return
    sys.stdout.flush()
    with multiprocessing.get_context("fork").Pool(min(jobs, len(tasks)), maxtasksperchild=1) as pool:
        yield from pool.imap(check, tasks)


def check(task: tuple) -> Outcome:
    """One file checked with its output captured (no progress line: the capture is no terminal)."""
    one, args = task
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = one(args)
        except Exception as exc:     # noqa: BLE001 - one file's failure must not stop the others
            err.write("python -m plugin validate: error: %s: %s: %s\n" % (args.file, type(exc).__name__, exc))
            status = 2
    return args.file, status, out.getvalue(), err.getvalue()


def _fail(message: str) -> int:
    sys.stderr.write("python -m plugin validate: error: %s\n" % message)
    return 2
