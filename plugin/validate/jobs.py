"""`validate --jobs N`: one module's functions checked over N processes, with the output of one.

The processes are forked after the tables are read and the analysis is
set up (plugin.validate.offline), so each starts with the same view of the
file. The functions, in address order, are cut into chunks handed out in
order; a worker analyses and checks each function of its chunk whose
analysis is final (CodeAnalysis.is_final) and says which of them jump into
a part a table says is entered by a jump (a .cold part). This process then
analyses those parents again, follows their jumps into the parts
(analyse_continuations) and checks the parts last, as one process does: the
same functions are reported in the same order.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from typing import List, Tuple

CHUNKS_PER_JOB = 8          # chunks per process: enough to even out big and small functions
SMALLEST_CHUNK = 32         # functions

_work = None                # (analysis, check, wanted starts): set in this process before the fork


def default_jobs() -> int:
    """One process per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not Linux
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def chunks(functions: List[Tuple[int, int]], jobs: int) -> List[List[Tuple[int, int]]]:
    size = max(SMALLEST_CHUNK, -(-len(functions) // (jobs * CHUNKS_PER_JOB)))
    return [functions[i:i + size] for i in range(0, len(functions), size)]


def _run_chunk(chunk):
    analysis, check, wanted = _work
    checked, parents = [], []
    entered_by_jumps = analysis.entry_states
    for start, end in chunk:
        result = analysis.function(start, end)
        if any(target in entered_by_jumps for target, _ in result.exits):
            parents.append((start, end))
        if not analysis.is_final(start):
            continue
        if start in wanted:
            checked.append(check(start, end))
        analysis.forget_states(start)
    return checked, parents


def check_all(analysis, functions, chosen, check, add, jobs: int) -> None:
    """offline.check_all over `jobs` processes: add(FunctionReport or None, problems) in the same order."""
    global _work
    ordered = sorted(functions.items())
    if not can_fork() or len(ordered) <= SMALLEST_CHUNK:
        from plugin.validate.offline import check_all as one_process
        one_process(analysis, functions, chosen, check, add)
        return
    _work = (analysis, check, set(start for start, _ in chosen))
    sys.stdout.flush()              # a forked child must not write this process's buffered output again
    parents = []
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for checked, found in pool.imap(_run_chunk, chunks(ordered, jobs)):
                for function, problems in checked:
                    add(function, problems)
                parents.extend(found)
    finally:
        _work = None
    for start, end in parents:
        analysis.function(start, end)
    for start, end in ordered:
        if not analysis.is_final(start):
            analysis.function(start, end)
    analysis.analyse_continuations()
    for start, end in chosen:
        if not analysis.is_final(start):
            add(*check(start, end))
