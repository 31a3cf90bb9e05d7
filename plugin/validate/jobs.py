"""`validate --jobs N`: one module's functions checked over N processes, with the output of one.

The processes are forked after the tables are read and the analysis is
set up (plugin.validate.offline), including which functions never return
(CodeAnalysis.decide_noreturn), so each starts with the same view of the
file and no process analyses a function outside its share. The functions
whose analysis is final, in address order, are cut into chunks handed out
in order; a worker analyses and checks each function of its chunk and sends
back its jumps into parts (.cold parts) with their frames. Then the parts
are analysed and checked in rounds (plugin.validate.parts), each round's
parts spread over the processes with the frames that enter them. The parts
are reported last, in address order, as one process does: the same
functions in the same order, with the same verdicts.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from typing import List, Tuple

from plugin.validate import parts as cold_parts

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
    """Round 1: analyse and check a chunk of final functions; give their jumps into parts."""
    analysis, check, wanted = _work
    checked, continuations = [], {}
    for start, end in chunk:
        result = analysis.function(start, end)
        if start in wanted:
            checked.append(check(start, end))
        continuations[start] = analysis.continuation_exits(result)
        analysis.forget_states(start)
    return checked, continuations


def _run_parts(tasks):
    """A round of parts: each analysed with the frames that enter it, checked, its jumps given."""
    analysis, check, wanted = _work
    return [cold_parts.run_part(analysis, check, wanted, *task) for task in tasks]


def batches(tasks: list, jobs: int) -> list:
    """A round's parts cut into about CHUNKS_PER_JOB tasks a process."""
    size = max(1, -(-len(tasks) // (jobs * CHUNKS_PER_JOB)))
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


def check_all(analysis, functions, chosen, check, add, jobs: int) -> None:
    """offline.check_all over `jobs` processes: add(FunctionReport or None, problems) in the same order."""
    global _work
    ordered = sorted(functions.items())
    if not can_fork() or len(ordered) <= SMALLEST_CHUNK:
        from plugin.validate.offline import check_all
        check_all(analysis, functions, chosen, check, add)
        return
    _work = (analysis, check, set(start for start, _ in chosen))
    sys.stdout.flush()              # a forked child must not write this process's buffered output again
    final = [(start, end) for start, end in ordered if analysis.is_final(start)]
    pending = {start: end for start, end in ordered if not analysis.is_final(start)}
    continuations = {}
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for checked, found in pool.imap(_run_chunk, chunks(final, jobs)):
                for function, problems in checked:
                    add(function, problems)
                continuations.update(found)

            def run(tasks):
                out = []
                for done in pool.imap(_run_parts, batches(tasks, jobs)):
                    out.extend(done)
                return out
            checked_parts = cold_parts.settle(pending, continuations, run)
    finally:
        _work = None
    for start, _ in chosen:
        if checked_parts.get(start) is not None:
            add(*checked_parts[start])
