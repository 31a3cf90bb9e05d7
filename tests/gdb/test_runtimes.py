"""The runtime matrix under GDB: C, C++, Rust and Go programs built with Debian's
toolchains, stopped where people debug them (tests/helpers/runtime_stops.py).

Oracles: GDB itself. At each stop
- GDB's `bt` with the plugin loaded (default settings) is GDB's `bt` without it;
- the plugin's walk (`unwind backtrace -json`, default sources) is GDB's own
  physical frames (pc and sp; `backtrace past-main` on) up to the outermost
  frame GDB gets right, and ends there as outermost;
- `unwind compare` agrees on every one of those frames.
For Go the walk is also checked with the frame-pointer source alone (Go's
prologues, and runtime.goexit+1 as the goroutine's planted outermost return
address).
"""

import functools

import pytest

from gdb_actions import DISABLE
from gdbrun import run_gdb
from runtime_stops import PROGRAMS, STOPS, truth_length
from support import HELPERS

STEPPER = HELPERS / "gdb_stepper.py"

NAMED_IN_STOP_LINE = ("runtime.goexit", "__start_context", "runtime.systemstack")
GO_FP = (("fp", "json", "unwind backtrace -json -sources frame-pointer"),
         ("fp_text", "cmd", "unwind backtrace -sources frame-pointer"))
EXACT_NAMES = ("[gdb.execute('info symbol %d' % f['pc'], to_string=True) for f in results['native']]")


def _frames(frames, count):
    return [(f["pc"], f["sp"]) for f in frames[:count]]


def _session(name, extra_actions=()):
    stop = STOPS[name]
    binary = PROGRAMS[stop.program]()
    actions = [("skip%d" % i, "cmd", "continue") for i in range(stop.extra.get("skip_hits", 0))]
    if "then" in stop.extra:
        actions += [("then", "cmd", "break %s" % stop.extra["then"]), ("go", "cmd", "continue")]
    actions += [("bt_with", "cmd", "bt"),
                ("ours", "json", "unwind backtrace -json"),
                *extra_actions,
                ("compare", "json", "unwind compare -json"),
                ("disable", "cmd", DISABLE),
                ("bt_without", "cmd", "bt"),
                ("past_main", "cmd", "set backtrace past-main on"),
                ("native", "frames", None),
                ("names", "py", EXACT_NAMES)]
    results, transcript = run_gdb(binary, actions, args=stop.args, breakpoint=stop.breakpoint, setup=stop.setup)
    for key, value in results.items():
        assert not (isinstance(value, dict) and "error" in value), (key, value, transcript[-3000:])
    return stop, results, transcript


def _check_walk(walk, native, count, ends_by="outermost"):
    assert _frames(walk["frames"], len(walk["frames"])) == _frames(native, count), (walk["frames"], native[:count])
    assert walk["stop_reason"] == ends_by, walk


@pytest.mark.parametrize("name", sorted(STOPS))
def test_runtime_stop_bt_unchanged(name):
    """"It only adds": GDB's bt is the same with and without the plugin."""
    _, results, transcript = _cached_session(name)
    assert results["bt_with"] == results["bt_without"], transcript[-3000:]
    assert results["bt_with"].count("\n#") >= 2


@pytest.mark.parametrize("name", sorted(STOPS))
def test_runtime_stop_walk_matches_gdb(name):
    stop, results, _ = _cached_session(name)
    native = results["native"]
    count = truth_length(results["names"], stop.truth_ends)
    assert count >= 3
    _check_walk(results["ours"], native, count, stop.ends_by)
    if stop.truth_ends in NAMED_IN_STOP_LINE:       # decided from the runtime's own address, and said so
        assert stop.truth_ends in results["ours"]["stop_detail"], results["ours"]
    rows = results["compare"]["frames"][:count]
    assert all(row["agrees"] for row in rows), results["compare"]["summary"]


@functools.lru_cache(maxsize=None)
def _cached_session(name):
    return _session(name, GO_FP if name.startswith("go-") else ())


@pytest.mark.parametrize("name", ["go-goroutine", "go-main", "go-mallocgc"])
def test_go_by_frame_pointers_alone(name):
    """Go's prologues are frame-pointer prologues, and a goroutine ends at runtime.goexit,
    decided from the planted return address and named in the stop line."""
    stop, results, _ = _cached_session(name)
    native = results["native"]
    count = truth_length(results["names"], stop.truth_ends)
    fp = results["fp"]
    _check_walk(fp, native, count)
    assert all(f["method"] == "frame-pointer" for f in fp["frames"][1:]), fp["frames"]
    assert fp["frames"][-1]["function"].startswith("runtime.goexit")
    assert "runtime.goexit+1" in results["fp_text"] and "outermost frame" in results["fp_text"]
    # unwind compare no longer holds the planted runtime.goexit+1 against GDB.
    goexit = results["compare"]["frames"][count - 1]
    assert goexit["agrees"], goexit


def test_go_prologues_and_epilogues_at_every_instruction():
    """Single-step Go code (main.work's recursion down to main.stopHere and back): at every
    instruction, its stack-bound check, `sub`, `mov %rbp`, `lea`, body, `mov`, `add` and
    `ret`, the frame-pointer source gives GDB's caller (GDB reads Go's .debug_frame)."""
    binary = PROGRAMS["go"]()
    # Only this thread runs while stepping: were sysmon to run, it would find the goroutine running
    # for long (in wall time) and preempt it, and the trace would go into runtime.morestack.
    results, transcript = run_gdb(binary, [("load", "cmd", "source %s" % STEPPER),
                                           ("lock", "cmd", "set scheduler-locking step"),
                                           ("trace", "py", "step_trace(70)")], breakpoint="*'main.work'")
    trace = results["trace"]
    assert isinstance(trace, list) and len(trace) == 70, (trace, transcript[-3000:])
    wrong = [t for t in trace if t["ours"] != t["theirs"]]
    assert not wrong, wrong
    # The trace went through the prologue's and the epilogue's every kind of instruction.
    pcs = {t["pc"] for t in trace}
    assert len(pcs) >= 20



def test_go_stack_growth_call_is_before_the_frame():
    """The block Go's stack-bound check branches to (spill, call runtime.morestack_noctxt,
    reload, jump back to the start) runs before the frame is set up, though it lies after the
    body: the frame-pointer source finds the caller at [rsp] there, as GDB does at the entry.
    The state there is the entry's (the check only compares), so pc is moved to each of its
    instructions from the entry; then the call is stepped into, and the return address into
    the block is unwound the same way."""
    binary = PROGRAMS["go"]()
    results, transcript = run_gdb(binary, [("load", "cmd", "source %s" % STEPPER),
                                           ("tail", "py", "growth_tail()")], breakpoint="*'main.work'")
    tail = results["tail"]
    assert isinstance(tail, dict), transcript[-3000:]
    assert "at" in tail and len(tail["at"]) >= 3, (tail, transcript[-3000:])                # the spills and the call
    assert all(caller == tail["truth"] for caller in tail["at"].values()), tail
    frames = tail["in_morestack"]
    assert frames[0][0].startswith("runtime.morestack"), frames
    assert frames[1][0] == "main.work", frames
    assert frames[2][1:] == tail["truth"], frames
