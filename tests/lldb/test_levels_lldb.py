"""`unwind backtrace/explain` in LLDB number frames as LLDB's `bt` does.

Oracle: LLDB's own frame list (SBFrame.IsInlined(), IsArtificial(),
GetFunctionName() at each index). The plugin walks physical frames; an
inlined call is numbered before the physical frame it runs in, a tail call
(LLDB's "[artificial]" frame) after the physical frame that took its place.
"""
from __future__ import annotations

from lldbrun import run_lldb
from support import build, walk_levels


def _program(source):
    return build("../gdb/" + source, ["-O2"])       # the C files GDB's level tests use, built the same way


def _lldb_levels(frames):
    """{index: (function, kind)} of LLDB's frames; the last group of inlined frames is cut where
    the plugin's walk may end differently (nothing here: every test stops well inside main)."""
    out = {}
    for index, frame in enumerate(frames):
        kind = "tail-call" if frame["artificial"] else "inline" if frame["inlined"] else "physical"
        out[index] = (frame["function"], kind)
    # An inlined frame with no concrete frame on its stack after it is physical (native.py).
    for index, frame in enumerate(frames):
        after = frames[index + 1] if index + 1 < len(frames) else None
        if frame["inlined"] and not frame["artificial"] and (
                after is None or after["artificial"] or (after["cfa"], after["sp"]) != (frame["cfa"], frame["sp"])):
            out[index] = (frame["function"], "physical")
    return out


def test_tail_call_frames_take_lldbs_numbers_and_explain_follows_frame_select():
    results, _ = run_lldb(_program("tailcall.c"), [
        ("frames", "frames", None),
        ("full", "json", "unwind backtrace --json"),
        ("select", "cmd", "frame select 2"),
        ("explain", "json", "unwind explain --json"),
        ("explain_text", "cmd", "unwind explain"),
        ("explain3", "cmd", "unwind explain 3"),
    ])
    theirs = _lldb_levels(results["frames"])
    assert [kind for _, kind in theirs.values()].count("tail-call") >= 2, theirs    # middle and outer, at -O2
    ours = walk_levels(results["full"]["frames"])
    assert {i: ours.get(i) for i in theirs} == theirs
    middle = next(i for i, (name, kind) in theirs.items() if kind == "tail-call")
    assert middle == 2
    explained = results["explain"]["frames"][0]
    assert 2 in [v["level"] for v in explained["tail_calls"]], explained
    assert results["explain_text"]["output"].startswith("#2 %s: a tail-call frame" % theirs[2][0])
    assert results["explain3"]["output"].startswith("#3 %s: a tail-call frame" % theirs[3][0])


def test_inlined_frame_0_takes_lldbs_numbers():
    results, _ = run_lldb(_program("inline_first.c"), [
        ("frames", "frames", None),
        ("full", "json", "unwind backtrace --json"),
        ("explain1", "json", "unwind explain --json 1"),
    ], breakpoint="outer")
    theirs = _lldb_levels(results["frames"])
    ours = walk_levels(results["full"]["frames"])
    assert {i: ours.get(i) for i in theirs} == theirs
    assert theirs[0] == ("helper", "inline")       # LLDB's breakpoint on outer lands in the inlined helper
    assert results["full"]["frames"][0]["level"] == 1
    assert results["explain1"]["frames"][0]["function"] == "outer"
