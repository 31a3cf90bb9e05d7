"""`unwind cache` in LLDB: `unwind backtrace`'s plans (plugin.cache.BoundedCache) with counts a walk moves.

The first `unwind backtrace` of a recursion makes a plan per distinct pc and
replays it for the other frames (hits); the second replays every frame. The
frame count is the walk's own JSON; the plans' entries stay within the bound.
"""

from lldbrun import run_lldb
from support import build

DEPTH = 40


def _plans(data):
    entry, = [c for c in data["caches"] if c["name"] == "backtrace plans"]
    return entry


def test_a_backtrace_moves_the_plans_counts():
    results, _ = run_lldb(build("chain.c", ["-O0"]), [
        ("before", "json", "unwind cache --json"),
        ("bt", "json", "unwind backtrace --json"),
        ("after", "json", "unwind cache --json"),
        ("bt2", "json", "unwind backtrace --json"),
        ("again", "json", "unwind cache --json"),
        ("text", "cmd", "unwind cache"),
    ], args=["recurse", str(DEPTH)], breakpoint="stop_here")
    before, after, again = (_plans(results[k]) for k in ("before", "after", "again"))
    frames = len(results["bt"]["frames"])
    assert frames >= DEPTH + 3 and len(results["bt2"]["frames"]) == frames
    assert (before["hits"], before["misses"]) == (0, 0)
    assert after["hits"] >= DEPTH - 2 and 0 < after["entries"] <= after["misses"] < 12
    assert again["hits"] - after["hits"] >= frames - 3          # the second walk: replays
    assert again["misses"] - after["misses"] <= 2
    for entry in results["again"]["caches"]:
        assert 0 <= entry["entries"] <= entry["bound"], entry
    text = results["text"]["output"]
    assert "  backtrace plans: " in text and "CFI rows" in text
