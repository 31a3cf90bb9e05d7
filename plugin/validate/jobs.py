"""`validate --jobs N`: one module's functions checked over N processes, with the output of one.

The processes are forked after the tables are read and the analysis is
set up (plugin.validate.offline), so each starts with the same view of the
file. The functions, in address order, are cut into chunks handed out in
order; a worker analyses and checks each function of its chunk whose
analysis is final (CodeAnalysis.is_final) and says which of them jump into
a part a table says is entered by a jump (a .cold part). Then each part,
with every function that jumps into it, is one task of a second round: a
worker analyses those parents (again, unless it did in the first round),
follows their jumps into the part (analyse_continuations) and checks it.
The parts are reported last, in address order, as one process does: the
same functions in the same order.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
from typing import List, Tuple

from plugin.validate.offline import settle

CHUNKS_PER_JOB = 8          # chunks per process: enough to even out big and small functions
SMALLEST_CHUNK = 32         # functions
ROUNDS = 3                  # of parts reached from parts, as CodeAnalysis.analyse_continuations

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
    """Round 1: analyse a chunk, check its final functions; say which jump into parts (.cold)."""
    analysis, check, wanted = _work
    checked, edges = [], []
    for start, end in chunk:
        result = analysis.function(start, end)
        targets = sorted(set(part for part, _, _ in analysis.continuation_exits(result)))
        if targets:
            edges.append((start, end, targets))
        if not analysis.is_final(start):
            continue
        if start in wanted:
            checked.append(check(start, end))
        analysis.forget_states(start)
    return checked, edges


def _run_groups(batch):
    """Round 2: the parts (.cold) of a batch of groups, with the frames of every jump that reaches
    them; and the jumps from these parts into parts outside the batch (a part entered from a part)."""
    analysis, check, wanted = _work
    parents = [p for group_parents, _ in batch for p in group_parents]
    parts = sorted(p for _, group_parts in batch for p in group_parts)
    for start, end in sorted(parents + parts):
        analysis.function(start, end)
    settle(analysis)
    inside = set(start for start, _ in parents + parts)
    edges = []
    for start, end in parts:
        targets = set(part for part, _, _ in analysis.continuation_exits(analysis.function(start, end)))
        if targets - inside:
            edges.append((start, end, sorted(targets)))
    checked = [(start, check(start, end)) for start, end in parts if start in wanted]
    for start, _ in parents:        # the parts keep theirs: a later batch may reach them again
        analysis.forget_states(start)
    return checked, edges


def batches(groups_found, jobs: int) -> list:
    """The groups of round 2 packed into about CHUNKS_PER_JOB tasks a process: each task settles
    its parts' frames once (analyse_continuations reads every result a process holds)."""
    size = max(1, -(-len(groups_found) // (jobs * CHUNKS_PER_JOB)))
    return [groups_found[i:i + size] for i in range(0, len(groups_found), size)]


def groups(ordered, edges, is_final):
    """[(parents, parts)]: the parts a table says are entered by a jump, each with every function
    that jumps into it, joined where they share one (union-find over the jumps)."""
    ends = dict(ordered)
    leader = {}

    def find(node):
        while leader.setdefault(node, node) != node:
            leader[node] = leader[leader[node]]
            node = leader[node]
        return node
    for start, _, targets in edges:
        for target in targets:
            leader[find(start)] = find(target)
    members = {}
    for start, _ in ordered:
        if not is_final(start) or start in leader:
            members.setdefault(find(start), []).append(start)
    out = []
    for group in members.values():
        parts = [(s, ends[s]) for s in group if not is_final(s)]
        if parts:
            out.append(([(s, ends[s]) for s in group if is_final(s)], parts))
    return out


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
    edges, parts = [], {}
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for checked, found in pool.imap(_run_chunk, chunks(ordered, jobs)):
                for function, problems in checked:
                    add(function, problems)
                edges.extend(found)
            pending = groups(ordered, edges, analysis.is_final)
            for _ in range(ROUNDS):
                found = []
                for checked, more in pool.imap_unordered(_run_groups, batches(pending, jobs)):
                    parts.update(checked)
                    found.extend(more)
                if not found:
                    break
                edges.extend(found)         # parts reached from parts: their groups joined, done again
                touched = set(start for start, _, _ in found) | set(t for _, _, ts in found for t in ts)
                pending = [g for g in groups(ordered, edges, analysis.is_final)
                           if any(start in touched for start, _ in g[0] + g[1])]
    finally:
        _work = None
    for start, _ in chosen:
        if start in parts:
            add(*parts[start])
