"""`unwind backtrace/explain/compare` number frames as GDB's `bt` does.

Oracle: GDB's own frame chain (gdb.Frame.level(), .type(), .name()), inline
and tail-call frames included. The plugin walks physical frames; inline and
tail-call frames are attached to the physical frame they share.
"""

import shutil

import pytest

from gdb_actions import claim_all
from gdbrun import run_gdb
from support import build, walk_levels
from test_transcripts import inline_program, local_program

ALL_FRAMES = {"include_all": True}
KIND = {"inline": "INLINE_FRAME", "tail-call": "TAILCALL_FRAME"}


def _gdb_levels(frames, gdb_types):
    """{level: (name, kind)} of GDB's own frame chain."""
    names = {getattr(gdb_types, "INLINE_FRAME"): "inline", getattr(gdb_types, "TAILCALL_FRAME"): "tail-call"}
    return {i: (f["name"], names.get(f["type"], "physical")) for i, f in enumerate(frames)}


class _Types:
    def __init__(self, values):
        self.INLINE_FRAME, self.TAILCALL_FRAME = values


# GDB's frame chain (virtual frames included), its frame type numbers and the plugin's whole walk.
LEVELS = [
    ("gdb", "frames", ALL_FRAMES),
    ("types", "py", "[gdb.INLINE_FRAME, gdb.TAILCALL_FRAME]"),
    ("full", "json", "unwind backtrace -json"),
]
ACTIONS = LEVELS + [
    ("one", "json", "unwind backtrace -json 1"),
    ("three", "json", "unwind backtrace -json 3"),
    ("three_text", "cmd", "unwind backtrace 3"),
    ("explain0", "json", "unwind explain -json"),
    ("explain0_text", "cmd", "unwind explain"),
    ("compare", "json", "unwind compare -json"),
]


def _check(results, expect_virtual):
    gdb = _gdb_levels(results["gdb"], _Types(results["types"]))
    ours = walk_levels(results["full"]["frames"])
    assert any(kind == expect_virtual for _, kind in gdb.values()), gdb     # the fixture has one
    # Every level GDB's bt has: same function, same kind (inline/tail-call/physical).
    assert {level: ours.get(level) for level in gdb} == gdb
    # `unwind backtrace N` labels frames as the full walk does and shows N levels.
    three = walk_levels(results["three"]["frames"])
    assert all(three[level] == ours[level] for level in range(3) if level in three)
    assert sum(1 for line in results["three_text"].splitlines() if line.startswith("#")) == 3
    assert results["three"]["stop_reason"] == "limit"
    assert any(level == 0 for level in walk_levels(results["one"]["frames"]))
    # Compare rows carry GDB's levels of the physical frames.
    physical = sorted(level for level, (_, kind) in gdb.items() if kind == "physical")
    assert [row["level"] for row in results["compare"]["frames"][:len(physical)]] == physical
    return gdb, ours


def test_frame_0_in_inlined_code_levels_match_gdb():
    results, _ = run_gdb(inline_program(), ACTIONS, breakpoint="*outer")
    gdb, ours = _check(results, "inline")
    assert gdb[0] == ("helper", "inline") and gdb[1] == ("outer", "physical")
    # `unwind explain` without LEVEL explains GDB's selected frame, #0: the inline helper,
    # saying whose physical frame it shares, then that frame.
    text = results["explain0_text"]
    assert text.startswith("#0 helper: an inline frame") and "inlined into #1 outer" in text, text
    assert "#1 outer in " in text
    assert [f["level"] for f in results["explain0"]["frames"]] == [1]


def test_tail_call_levels_match_gdb():
    results, _ = run_gdb(local_program("tailcall.c"), ACTIONS + [
        ("up2", "cmd", "frame 2"),
        ("explain2", "cmd", "unwind explain"),
        ("explain4", "cmd", "unwind explain 4"),
        ("up3", "cmd", "frame 3"),
        ("from3", "json", "unwind backtrace -json 2"),
    ], breakpoint="stop_here")
    gdb, ours = _check(results, "tail-call")
    assert [gdb[i] for i in range(5)] == [("stop_here", "physical"), ("leaf", "physical"),
                                          ("middle", "tail-call"), ("outer", "tail-call"), ("main", "physical")]
    assert results["explain2"].startswith("#2 middle: a tail-call frame") and "#1 leaf's frame" in results["explain2"]
    # main is recovered from leaf (#1), the physical frame below it, not from "#3".
    assert "#4 main in " in results["explain4"] and "recovered from frame #1 (leaf" in results["explain4"]
    assert "(frame #1's CFA)" in results["explain4"]
    # A walk from a selected tail-call frame keeps GDB's levels: #3 outer, then #4 main.
    assert walk_levels(results["from3"]["frames"]) == {3: ("outer", "tail-call"), 4: ("main", "physical")}


def test_libc_inline_frames_levels_match_gdb():
    """A Debian program stopped in libc, whose libc6-dbg debug info has inline frames."""
    program = shutil.which("sort")
    if program is None:
        pytest.fail("sort is not installed: run tests/setup.sh")
    results, _ = run_gdb(program, LEVELS + [("five", "json", "unwind backtrace -json 5")],
                         args=["/etc/services"], breakpoint="write")
    gdb = _gdb_levels(results["gdb"], _Types(results["types"]))
    ours = walk_levels(results["full"]["frames"])
    assert any(kind == "inline" for _, kind in gdb.values()), gdb
    assert {level: ours.get(level) for level in gdb} == gdb
    five = walk_levels(results["five"]["frames"])
    assert {level: five[level] for level in range(5)} == {level: ours[level] for level in range(5)}


STEPS = ("python import plugin.engine as e, gdb_unwinder.commands as c; "
         "c.reports.unwind.__globals__['STEPS'] = [0]; "
         "_s = e.step_frame; "
         "e.step_frame = lambda *a, **k: (e.STEPS.__setitem__(0, e.STEPS[0] + 1), _s(*a, **k))[1]")
STEP_COUNT = "__import__('plugin.engine').engine.STEPS[0]"      # step_frame calls so far


def test_walks_stop_at_the_frame_they_need():
    """`unwind backtrace N` and `unwind explain LEVEL` unwind no further than they need: the
    engine's step count (step_frame calls) after each command, on a 2000-deep recursion."""
    binary = build("chain.c", ["-O2"])
    actions = [("patch", "cmd", STEPS)]
    for name, command in [("bt2", "unwind backtrace 2"), ("explain3", "unwind explain 3"),
                          ("full", "unwind backtrace")]:
        actions += [(name, "cmd", command), ("after_" + name, "py", STEP_COUNT)]
    results, _ = run_gdb(binary, actions, args=["recurse", "2000"], breakpoint="stop_here")
    assert "#1 " in results["bt2"] and "#2 " not in results["bt2"]
    assert results["after_bt2"] == 2                     # #0 -> #1, and #1 -> #2 for #1's CFA
    assert "#3 recurse in " in results["explain3"]
    assert results["after_explain3"] - results["after_bt2"] == 4      # up to #4: does the walk end at #3?
    assert results["after_full"] - results["after_explain3"] > 2000


def test_explain_says_what_a_claimed_frame_loses():
    """With `set unwind claim all` GDB's bt takes the frames from the plugin: `unwind explain` says
    what GDB's API loses there, and GDB's own `info frame` shows it (no "Saved registers")."""
    binary = build("chain.c", ["-O0"])
    results, _ = run_gdb(binary, [
        ("auto", "cmd", "unwind explain 2"),
        claim_all(),
        ("bt", "cmd", "bt"),
        ("info", "cmd", "info frame 1"),
        ("claimed", "cmd", "unwind explain 2"),
        ("json", "json", "unwind explain -json 2"),
    ], args=["plain"], breakpoint="stop_here")
    assert "claimed:" not in results["auto"]           # the default leaves these frames to GDB
    assert "Saved registers" not in results["info"]    # GDB's own words for the loss
    text = results["claimed"]
    assert "claimed: GDB's bt takes this frame from the plugin (set unwind claim all)" in text, text
    assert "\"info frame\" in frame #1 lists no saved registers" in text
    assert results["json"]["frames"][0]["claimed"].startswith("claimed:")
