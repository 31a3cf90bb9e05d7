"""`unwind cache` in GDB: each of the plugin's caches, with counts GDB's own `bt` moves.

Under the default (`claim auto`) GDB's DWARF unwinder gives every frame of
the recursion, and the plugin's unwinder declines each from its return
address alone: the `caller verdicts` cache answers once per frame GDB asks
about (GDB's own frame count, from `bt`, is the oracle). Under `claim all`
GDB takes the frames from the plugin: `claimed frames` holds one per frame
GDB took (the unwinder's own count) and the plans are asked. The text and
the JSON name the same caches, each within its bound.
"""

from gdb_actions import claim_all, claimed
from gdbrun import run_gdb
from support import build

DEPTH = 40
FRAMES = "len(gdb.execute('bt', to_string=True).splitlines())"
FLUSH = "maintenance flush register-cache"      # GDB builds its frames again


def _by_name(data):
    return {entry["name"]: entry for entry in data["caches"] if entry["group"].startswith("GDB's bt")}


def test_a_bt_moves_the_unwinders_counts():
    results, _ = run_gdb(build("chain.c", ["-O0"]), [
        ("before", "json", "unwind cache -json"),
        ("frames", "py", FRAMES),
        ("after", "json", "unwind cache -json"),
        ("text", "cmd", "unwind cache"),
        claim_all(),
        ("flush", "cmd", FLUSH),
        ("again", "py", FRAMES),
        claimed(),
        ("all", "json", "unwind cache -json"),
    ], args=["recurse", str(DEPTH)], breakpoint="stop_here")
    before, after, under_all = _by_name(results["before"]), _by_name(results["after"]), _by_name(results["all"])
    frames = results["frames"]
    assert frames >= DEPTH + 3, frames
    verdicts = after["caller verdicts"]
    asked = verdicts["hits"] + verdicts["misses"] - before["caller verdicts"]["hits"] - before["caller verdicts"]["misses"]
    assert frames - 3 <= asked <= frames + 5, (asked, frames)     # about one answer per caller frame GDB built
    assert verdicts["hits"] - before["caller verdicts"]["hits"] >= DEPTH - 2     # the recursion: a few pcs
    assert verdicts["entries"] < 10
    for entry in list(after.values()) + list(under_all.values()):
        assert 0 <= entry["entries"] <= entry["bound"], entry
    for name in ("caller verdicts", "GDB covers", "plans", "claimed frames", "inline depths", "symbols"):
        assert name in after and "  %s: " % name in results["text"], name
    assert "the tables of " in results["text"] and "CFI rows" in results["text"]
    assert results["claimed"] >= DEPTH                     # GDB took the recursion from the plugin
    assert under_all["claimed frames"]["entries"] >= DEPTH
    assert under_all["plans"]["entries"] > after["plans"]["entries"]
