"""The parts of functions placed elsewhere (GCC's `.cold` parts), checked with the frames that reach them.

A part's table says it is not entered by a call (CodeAnalysis.entry_states).
Once every other function is analysed, each part is analysed from every
jump into it (its first byte or its middle) with the jump's frame, and
checked. A part's own jumps into other parts then give those new frames: the
parts whose set of entering frames changed are analysed and checked again,
round after round, until nothing changes or MAX_ROUNDS is reached. One
process (plugin.validate.offline) and `--jobs N` (plugin.validate.jobs) run
the same rounds, so both give the same verdicts; only where a round's batch
of parts is analysed differs.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

MAX_ROUNDS = 12         # chains of parts entered from parts (glibc's libio cleanup parts) settle well within


def seeds_of(continuations: Dict[int, list]) -> Dict[int, dict]:
    """part -> {key: (target, state, jump)}: every jump into each part, from every analysed function,
    in address order of the jumping function (the same order in any process)."""
    seeds: Dict[int, dict] = {}
    for source in sorted(continuations):
        for part, target, state, key, jump in continuations[source]:
            seeds.setdefault(part, {}).setdefault(key, (target, state, jump))
    return seeds


def settle(parts: Dict[int, int], continuations: Dict[int, list],
           run: Callable[[List[Tuple[int, int, list]]], list]) -> Dict[int, tuple]:
    """Analyse and check every part, then again each one whose entering frames changed.

    continuations: function start -> CodeAnalysis.continuation_exits of its final analysis, for
    every function that is not a part (updated here with the parts'). run([(part, end, seeds)])
    -> [(part, checked, exits)]: analyses each part with those seeds, checks it (checked: what
    Checker returns, or None when not wanted) and gives its continuation exits.
    Returns part -> checked, from its last analysis."""
    checked: Dict[int, tuple] = {}
    given: Dict[int, set] = {}
    pending = sorted(parts)
    for _ in range(MAX_ROUNDS):
        if not pending:
            break
        seeds = seeds_of(continuations)
        tasks = []
        for part in pending:
            found = seeds.get(part, {})
            given[part] = set(found)
            tasks.append((part, parts[part], list(found.values())))
        for part, result, exits in run(tasks):
            checked[part] = result
            continuations[part] = exits
        seeds = seeds_of(continuations)
        pending = [p for p in sorted(parts) if set(seeds.get(p, {})) != given.get(p)]
    return checked


def run_part(analysis, check, wanted, part: int, end: int, seeds: list):
    """One part analysed with its entering frames (seeds), checked when wanted; its states dropped."""
    analysis.set_seeds(part, seeds)
    analysis.function(part, end)
    result = check(part, end) if part in wanted else None
    exits = analysis.continuation_exits(analysis.function(part, end))
    analysis.forget_states(part)
    return part, result, exits
