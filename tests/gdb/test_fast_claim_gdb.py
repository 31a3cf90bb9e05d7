"""The unwinder's fast claims (a FastRow replayed on the register file the previous claim
handed on, computed a few frames ahead: gdb_unwinder/fast_claims.py) give GDB what the full engine
gives.

With `set unwind claim all`, each scenario's stack is read from GDB (pc, sp and every
general register of every frame) with plans off (the engine decides each frame) and on;
they must be equal, and with plans on nearly every frame after the first claim must have
been a fast claim (so the comparison covers that path, not the slower replay).
"""

import shutil

import pytest

from gdb_actions import LOOK_AT_EACH
from gdbrun import run_gdb
from sframe_demo import STRIP_CFI
from support import build, pcs
from test_plans_gdb import DEFINE
from test_transcripts import FIXED_SEEDS

PLANS = "gdb._unwind_plugin_state.inferior().plans"
CLAIMED = "gdb._unwind_plugin_state.unwinder.claimed"


def _compare(program, args, breakpoint, setup=(), claim="all"):
    results, _ = run_gdb(program, [
        ("define", "cmd", DEFINE),
        ("all", "cmd", "set unwind claim %s" % claim),
        ("off", "py", "with_plans(False)"),
        ("engine", "py", "stack_registers()"),
        ("before", "py", CLAIMED),
        ("on", "py", "with_plans(True)"),
        ("first", "py", "stack_registers()"),
        ("again", "py", "with_plans(True)"),
        ("second", "py", "stack_registers()"),
        ("after", "py", CLAIMED),
        ("fast", "py", PLANS + ".fast_hits"),
    ], args=args, breakpoint=breakpoint, setup=list(setup) + ["set backtrace past-main on"])
    assert len(results["engine"]) > 4
    assert results["first"] == results["engine"]
    assert results["second"] == results["engine"]
    return results


def test_fast_claims_equal_the_engine_on_a_deep_recursion():
    results = _compare(build("chain.c", ["-O0"]), ["recurse", "300"], "stop_here")
    claimed_with_plans = results["after"] - results["before"]
    assert results["fast"] >= 290 * 2, results       # two walks: every recursive frame but the first
    assert results["fast"] <= claimed_with_plans


@pytest.mark.parametrize("flags", [["-O2"], ["-O2", "-fomit-frame-pointer"]])
def test_fast_claims_equal_the_engine_on_optimised_code(flags):
    results = _compare(build("chain.c", flags), ["qsort"], "stop_here")
    assert results["after"] > results["before"]


def test_fast_claims_equal_the_engine_on_python3():
    """Debian's python3 (interpreter and libc frames, rows that save up to six registers)."""
    program = shutil.which("python3", path="/usr/bin")
    if program is None:
        pytest.fail("python3 is not installed")
    results = _compare(program, ["-c", "\"import os; f = lambda n: list(map(f, [n - 1])) if n else os.getpid(); f(40)\""],
                       "getpid", setup=FIXED_SEEDS + ["set breakpoint pending on"])
    assert results["fast"] >= 150, results


WALK = "\n".join([
    "python",
    "def walk_declines():",
    "    unwinder = gdb._unwind_plugin_state.unwinder",
    "    gdb.invalidate_cached_frames()",
    "    unwinder.declines.clear()",
    "    claimed = unwinder.claimed",
    "    frames, frame = [], gdb.newest_frame()",
    "    while frame is not None:",
    "        frames.append([len(frames), frame.pc(), int(frame.read_register('sp'))])",   # its level (GDB 10: no level())
    "        frame = frame.older()",
    "    return [frames, [list(d) for d in unwinder.declines], unwinder.claimed - claimed]",
    "end",
])


@pytest.mark.parametrize("scenario", [["signal"], ["qsort"], ["thread"]])
def test_auto_declines_from_the_pc_alone_as_the_slow_path_does(scenario):
    """Under auto, the first walk decides each return address in the slow path; the second
    declines from the pc alone (CallerVerdicts): the same frames, the same declines and reasons."""
    results, _ = run_gdb(build("chain.c", ["-O2"]), [
        ("define", "cmd", WALK),
        ("quiet", "py", "walk_declines()"),
        ("look", "cmd", LOOK_AT_EACH),
        ("first", "py", "walk_declines()"),
        ("second", "py", "walk_declines()"),
    ], args=scenario, breakpoint="stop_here", setup=["handle SIGUSR1 nostop noprint pass",
                                                     "set backtrace past-main on"])
    frames, declines, claimed = results["first"]
    # By default (analysis on: code no FDE covers may be read) each frame is looked at and declined.
    assert results["quiet"] == [frames, declines, 0]
    assert len(frames) > 3 and len(declines) > 3
    assert results["second"] == [frames, declines, claimed]
    assert any("GDB's DWARF unwinder covers" in reason for _, _, reason in declines)


def test_auto_fast_claims_sframe_only_code_as_the_engine_does():
    """Under auto the plugin claims frames GDB has no table for (SFrame only, .eh_frame removed):
    those claims take the fast path too, give the engine's registers, and GDB's bt equals GDB's
    own on the binary that still has .eh_frame."""
    flags = ["-O0", "-Wa,--gsframe"]
    plain, stripped = build("chain.c", flags), build("chain.c", flags, post=[["objcopy", *STRIP_CFI, "{out}"]])
    right, _ = run_gdb(plain, [("disable", "cmd", "disable unwinder global unwind-plugin"),
                               ("frames", "frames", None)], args=["recurse", "200"])
    results = _compare(stripped, ["recurse", "200"], "stop_here", claim="auto")
    assert results["fast"] >= 190 * 2, results["fast"]
    ours, _ = run_gdb(stripped, [("frames", "frames", None)], args=["recurse", "200"])
    assert pcs(ours["frames"]) == pcs(right["frames"])


STOP_ANSWERS = "setattr(gdb._unwind_plugin_state, 'use_stop_answers', %s)"
MEMO_HITS = "gdb._unwind_plugin_state.unwinder.memo.hits"


@pytest.mark.parametrize("stop_answers", [False, True], ids=["afresh", "stop-answers"])
def test_claims_computed_ahead_stay_in_their_thread_and_level(stop_answers):
    """Claims computed ahead are used only for the question they were computed for: with two
    threads, `thread apply all bt`, switching threads, `bt 2` (GDB asks no further) then whole
    walks, and a selected frame, GDB's frames (pc, sp, name) and a caller's registers under
    claim all equal its own. Each frame answered afresh (the second walks go through the answers
    computed ahead), and with the answers kept for the stop (stop_answers.py: GDB forgets its frames
    at every thread switch, and the second walks are answered again from them)."""
    program = build("chain.c", ["-O0"])
    steps = [("all_bt", "cmd", "thread apply all bt"),
             ("t1", "cmd", "thread 1"), ("bt1", "cmd", "bt 2"), ("f1", "frames", None),
             ("t2", "cmd", "thread 2"), ("bt2", "cmd", "bt 2"), ("f2", "frames", None),
             ("up", "cmd", "frame 3"), ("regs", "cmd", "info registers rip rsp rbp rbx"),
             ("t1b", "cmd", "thread 1"), ("f1b", "frames", None), ("again", "cmd", "thread apply all bt"),
             ("t2b", "cmd", "thread 2"), ("f2b", "frames", None)]
    results, transcript = run_gdb(program, [
        ("all", "cmd", "set unwind claim all"), ("memo", "py", STOP_ANSWERS % stop_answers),
        *steps, ("fast", "py", PLANS + ".fast_hits"), ("hits", "py", MEMO_HITS),
        ("off", "cmd", "disable unwinder global unwind-plugin"),
        *[("native_" + name, kind, payload) for name, kind, payload in steps]], args=["thread"])
    if stop_answers:
        assert results["hits"] > 0, transcript      # frames GDB built again answered from the stop's answers
    else:
        assert results["fast"] > 0, transcript       # the second walks went through answers computed ahead
        assert results["hits"] == 0
    assert "level1" in [f["name"] for f in results["f2"]], results["f2"]
    for name in ("f1", "f2", "f1b", "f2b", "regs"):
        assert results[name] == results["native_" + name], name
