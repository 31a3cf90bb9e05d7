"""LLDB's own frames through the plugin (LLDB 22's frame provider), on as loaded; `unwind provider on|off`.

The oracle is LLDB itself: on a program stripped of its symbols and of
.eh_frame, LLDB 22 alone stops after the first frame; with the provider (as loaded),
LLDB's own frames (SBThread, `bt`) are those LLDB finds on the twin that
kept its symbols and tables (same code, same addresses: LLDB disables
ASLR). Where LLDB alone is right (ordinary programs, JIT code that keeps a
frame record, an SFrame-only program), its frames are the same with the
provider on. Older versions answer with one line naming the version needed.
"""

import re

import pytest

from fallback_scenarios import BUILDS
from lldbrun import run_batch, run_lldb, version
from support import NO_EH, build, pcs, run

PROVIDER_VERSION = 22
STRIP_ALL = [["objcopy", "--strip-all", *NO_EH, "{out}"]]
SFRAME_ONLY = [["objcopy", *NO_EH, "{out}"]]
REGISTERS = "[frame.GetRegisters().GetSize(), frame.GetPC()]"
LLDB_ALONE = ["unwind provider off"]       # before the launch: no target stops with the provider


def _twins(flags_name):
    flags = BUILDS[flags_name]
    twin = build("chain.c", flags, name="chain-twin-%s" % flags_name)
    bare = build("chain.c", flags, name="chain-bare-%s" % flags_name, post=STRIP_ALL)
    symbols = run(["nm", str(twin)]).stdout
    stop_here = int(re.search(r"^([0-9a-f]+) T stop_here$", symbols, re.M).group(1), 16)
    return twin, bare, stop_here


def _stopped_twins(flags_name, args, actions):
    """(the pcs of LLDB's frames on the twin with tables, the results of `actions` on the
    stripped twin), both stopped at stop_here's first instruction."""
    twin, bare, stop_here = _twins(flags_name)
    truth, _ = run_lldb(twin, [("frames", "frames", None)], args=args, setup=LLDB_ALONE)
    results, _ = run_lldb(bare, actions, args=args, breakpoint=None,
                          setup=["breakpoint set -a 0x%x -s %s" % (stop_here, bare.name)])
    return pcs(truth["frames"]), results


def _needs_lldb_22():
    """On LLDB before 22: `unwind provider` shows "off" and says which version is needed."""
    status, transcript = run_batch(build("chain.c", ["-O0"]), ["unwind provider", "unwind provider on"])
    assert status != 0, transcript
    assert "provider: off (needs LLDB 22 or later)" in transcript, transcript
    assert re.search(r"error: unwind provider: needs LLDB 22 or later \(the frame provider API\); "
                     r"this is LLDB %d\.\d+\.\d+" % version(), transcript), transcript


# LLDB alone stops after frame #0 of the program built -O2 -fomit-frame-pointer.
def test_provider_supplies_the_frames_lldb_cannot_find():
    if version() < PROVIDER_VERSION:
        return _needs_lldb_22()
    expected, results = _stopped_twins("O2-nofp", ["plain"], [
        ("loaded", "json", "unwind provider --json"),
        ("with", "frames", None),
        ("ours_with", "json", "unwind backtrace --json"),
        ("bare_off", "cmd", "unwind provider off"),
        ("alone", "frames", None),
        ("ours_alone", "json", "unwind backtrace --json"),
        ("on", "json", "unwind provider on --json"),
        ("again", "frames", None),
        ("explain", "json", "unwind explain all --json"),
        ("compare", "json", "unwind compare --json"),
        ("select", "cmd", "frame select 3"),
        ("selected", "json", "unwind backtrace --json 1"),
        ("registers", "py", REGISTERS),
        ("finish", "cmd", "finish"),
        ("after_finish", "frames", None),
        ("off", "json", "unwind provider off --json"),
        ("without", "frames", None),
    ])      # expected: stop_here level3 level2 level1 main, 2 in libc, _start
    alone = pcs(results["alone"])
    assert alone == expected[:1], (alone, expected)
    # As loaded, the provider is on: LLDB's own frames are the twin's, frame by frame (every one
    # found by instruction analysis or tables: no guess); LLDB's frame #0 is kept.
    assert results["loaded"] == {"provider": "on", "lldb_version": results["loaded"]["lldb_version"]}
    assert results["loaded"]["lldb_version"].startswith("%d." % PROVIDER_VERSION)
    assert results["on"] == results["loaded"]
    assert pcs(results["with"]) == expected, (results["with"], expected)
    assert results["again"] == results["with"]
    # `unwind backtrace` is the same with and without the provider.
    assert results["ours_with"] == results["ours_alone"]
    assert {f["method"] for f in results["ours_alone"]["frames"][1:]} <= {"cfi", "analysis"}, results["ours_alone"]
    assert results["with"][0] == results["alone"][0]
    supplied = list(range(1, len(expected)))
    assert results["explain"]["supplied"] == supplied, results["explain"]
    # `unwind compare` compares with LLDB's own unwinder, not with what the plugin supplied to it.
    assert [row["native"] is not None for row in results["compare"]["frames"]] == \
        [level == 0 for level in range(len(expected))], results["compare"]
    # From frame #3 (level1), the plugin's backtrace starts there.
    assert [f["pc"] for f in results["selected"]["frames"]] == [expected[3]], results["selected"]
    # A supplied frame has a pc and no registers: a dict frame gets only the registers LLDB's
    # own unwinder has at its index (none past its last frame), and a scripted frame with a
    # register context kills LLDB 22.1.8 (tests/lldb/test_lldb_scripted_frames.py).
    assert results["registers"] == [0, expected[3]], results["registers"]
    # `finish` from level1 (frame #3) returns to main, at the return address frame #4 shows.
    assert results["finish"]["ok"], results["finish"]
    assert results["after_finish"][0]["pc"] == expected[4], (results["after_finish"], expected)
    assert results["off"]["provider"] == "off"
    assert "[synthetic]" not in str(results["without"])


def test_provider_keeps_lldbs_frames_where_lldb_disagrees():
    """At -O0, stopped at stop_here's first instruction, LLDB alone follows the rbp chain and
    skips level3. The plugin finds level3, but a frame inserted there would be given LLDB's
    registers of its frame #1 (level2's), so the provider keeps LLDB's frames, supplies nothing,
    and `unwind compare` shows the disagreement."""
    if version() < PROVIDER_VERSION:
        return _needs_lldb_22()
    expected, results = _stopped_twins("O0", ["plain"], [
        ("with", "frames", None),
        ("explain", "json", "unwind explain all --json"),
        ("ours", "json", "unwind backtrace --json"),
        ("off", "cmd", "unwind provider off"),
        ("alone", "frames", None),
    ])
    alone = pcs(results["alone"])
    assert expected[1] not in alone and alone[:1] == expected[:1] and alone[1] == expected[2], (alone, expected)
    assert results["with"] == results["alone"]
    assert "supplied" not in results["explain"], results["explain"]
    assert pcs(results["ours"]["frames"])[:5] == expected[:5], results["ours"]


CASES = {   # name: (build, args): programs LLDB 22 alone unwinds right
    "plain-O2": (lambda: build("chain.c", ["-O2"]), ["plain"]),
    "qsort-O2": (lambda: build("chain.c", ["-O2"]), ["qsort"]),
    "thread-O0": (lambda: build("chain.c", ["-O0"]), ["thread"]),
    "jit-O2-nofp": (lambda: build("jit.c", ["-O2", "-fomit-frame-pointer"]), []),
    "sframe-only-O2": (lambda: build("chain.c", ["-O2", "-Wa,--gsframe"], name="chain-sframe-only",
                                     post=SFRAME_ONLY), ["plain"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_provider_keeps_lldbs_frames_where_lldb_is_right(case):
    if version() < PROVIDER_VERSION:
        return _needs_lldb_22()
    make, args = CASES[case]
    results, transcript = run_lldb(make(), [
        ("with", "frames", None),
        ("explain", "json", "unwind explain all --json"),
        ("bt", "cmd", "bt"),
        ("off", "cmd", "unwind provider off"),
        ("alone", "frames", None),
    ], args=args)
    assert len(results["alone"]) >= 4, results["alone"]
    assert results["with"] == results["alone"]
    assert "supplied" not in results["explain"], results["explain"]
    assert "[synthetic]" not in results["bt"]["output"], results["bt"]


def test_finish_from_a_supplied_frame_in_a_recursion_stops_at_the_first_return():
    """What LLDB 22.1.8 cannot do: `finish` from a supplied frame, in a recursion, stops at the
    first return to the frame's return address, from a deeper frame.

    Why: `finish` from frame N (ThreadPlanStepOut) sets a breakpoint at frame N+1's pc and
    keeps frame N+1's StackID; when the breakpoint is hit, DoPlanExplainsStop compares it with
    frame #0's: `else if (m_step_out_to_id < frame_zero_id) { // Either we stepped past the
    breakpoint, or the stack ID calculation was incorrect and we should probably stop.
    done = true; }` (lldb/source/Target/ThreadPlanStepOut.cpp). A supplied frame's StackID
    has no CFA (a dict frame is made with none: ScriptedFrameProvider.cpp,
    create_frame_from_dict; SBFrame.GetCFA() answers 0 or a small number), below every real
    frame's, so the first hit ends the step.
    The dict form has no key for a CFA, so a provider cannot give one."""
    if version() < PROVIDER_VERSION:
        return _needs_lldb_22()
    expected, results = _stopped_twins("O2-nofp", ["recurse", "6"], [
        ("with", "frames", None),
        ("cfas", "py", "[thread.GetFrameAtIndex(i).GetCFA() for i in range(5)]"),
        ("select", "cmd", "frame select 3"),
        ("finish", "cmd", "finish"),
        ("after", "frames", None),
    ])      # expected: stop_here, recurse x7, main, libc x2, _start
    assert pcs(results["with"]) == expected
    assert expected[2] == expected[3] == expected[4]        # recurse returning into recurse
    # LLDB alone has frame #0 only: every later frame is supplied, its CFA no stack address.
    cfas = results["cfas"]
    assert cfas[0] > 0x10000 and all(cfa < 0x10000 for cfa in cfas[1:]), [hex(c) for c in cfas]
    # A right `finish` from frame #3 would leave frames #4 on; LLDB stops at the first
    # return to frame #3's pc, when frame #1 returns into frame #2.
    assert results["finish"]["ok"], results["finish"]
    assert pcs(results["after"]) == expected[2:], (pcs(results["after"]), expected)


def test_guesses_reach_lldbs_bt_only_with_guesses_on():
    """With the analysis off, the plugin's walk of the stripped -O2 program is stack scanning:
    guesses, which LLDB's bt gets only with `unwind settings guesses on`; `unwind backtrace`
    shows them either way. A setting changed at a stop reaches `bt` at once."""
    if version() < PROVIDER_VERSION:
        return _needs_lldb_22()
    expected, results = _stopped_twins("O2-nofp", ["plain"], [
        ("sources", "cmd", "unwind settings sources cfi,scan"),
        ("default", "json", "unwind settings --json"),
        ("off", "frames", None),
        ("ours_off", "json", "unwind backtrace --json"),
        ("guesses", "cmd", "unwind settings guesses on"),
        ("on", "frames", None),
        ("ours_on", "json", "unwind backtrace --json"),
        ("explain", "json", "unwind explain all --json"),
        ("back", "cmd", "unwind settings guesses off"),
        ("off_again", "frames", None),
    ])
    assert results["default"]["claim_guesses"] is False, results["default"]
    assert pcs(results["off"]) == expected[:1], (results["off"], expected)
    assert results["ours_off"] == results["ours_on"]
    ours = results["ours_on"]["frames"]
    assert ours[1]["method"] == "scan", ours
    assert results["guesses"]["output"].strip() == "guesses (boolean) = on", results["guesses"]
    assert pcs(results["on"]) == [f["pc"] for f in ours], (results["on"], ours)
    assert results["explain"]["supplied"] == list(range(1, len(ours))), results["explain"]
    assert pcs(results["off_again"]) == expected[:1], results["off_again"]
