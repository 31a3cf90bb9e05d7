"""Go on arm64, live: tests/fixtures/runtimes/goroutine.go cross-built by Debian's go
(GOARCH=arm64), run under `qemu-aarch64 -g PORT` and gdb-multiarch.

Go's arm64 prologue keeps its frame record 8 bytes below sp (`str x30, [sp,
#-N]!; stur x29, [sp, #-8]; sub x29, sp, #8`), so the caller's sp is x29+8+N,
not x29+16. Oracle: GDB's own frames (its unwinder reads Go's .debug_frame;
the plugin's unwinder disabled) at three stops: main.stopHere in a goroutine
(a leaf, stopped at its `ret`), in the main goroutine, and runtime.mallocgc
called from main.allocate (stopped at the first instruction of its frame
set-up). The plugin's walk with the frame-pointer source alone must give
GDB's pc and sp for every frame it gives, reach runtime.goexit from the
goroutine and end there.

In the main goroutine Go 1.19 (Debian 12) leaves x29 pointing at the g0
stack inside runtime.main (below its sp), so the chain cannot be followed
past runtime.main: the walk must stop there with that reason, not guess.
"""

import pytest

from gdb_actions import DISABLE
from gdbrun import run_gdb
from qemu_user import qemu_user
from runtime_stops import build_go, truth_length
from support import HELPERS

STEPPER = HELPERS / "gdb_stepper.py"

NAMES = "[gdb.execute('info symbol %%d' %% f['pc'], to_string=True) for f in results['native%d']]"
STOPS = ("goroutine", "main", "mallocgc")
# One P and no asynchronous preemption (SIGURG): qemu-user's gdbstub sometimes hung
# with Go's threads signalling each other; the stacks at the stops are the same.
QEMU_OPTIONS = ("-cpu", "max,sve=off", "-E", "GOMAXPROCS=1", "-E", "GODEBUG=asyncpreemptoff=1")


def _at_stop(i):
    return [("fp%d" % i, "json", "unwind backtrace -json -sources frame-pointer"),
            ("off%d" % i, "cmd", DISABLE),
            ("native%d" % i, "frames", None),
            ("names%d" % i, "py", NAMES % i),
            ("on%d" % i, "cmd", "enable unwinder global unwind-plugin")]


@pytest.fixture(scope="module")
def stops():
    binary = build_go("goroutine.go", goarch="arm64")
    actions = (_at_stop(0) + [("c1", "cmd", "continue")] + _at_stop(1)
               + [("b2", "cmd", "break main.allocate"), ("c2", "cmd", "continue"),
                  ("b3", "cmd", "break runtime.mallocgc"), ("c3", "cmd", "continue")] + _at_stop(2))
    with qemu_user("qemu-aarch64", binary, (), options=QEMU_OPTIONS) as address:
        results, transcript = run_gdb(binary, actions, setup=["set backtrace past-main on"],
                                      breakpoint="main.stopHere", gdb_program="gdb-multiarch",
                                      remote=address, timeout=300)
    return results, transcript


@pytest.mark.parametrize("index", range(len(STOPS)), ids=STOPS)
def test_go_arm64_frame_pointer_walk_matches_gdb(stops, index):
    results, transcript = stops
    native, walk = results["native%d" % index], results["fp%d" % index]
    assert isinstance(walk, dict) and "frames" in walk, (walk, transcript[-3000:])
    count = truth_length(results["names%d" % index], "runtime.goexit")
    ours = [(f["pc"], f["sp"]) for f in walk["frames"]]
    assert ours == [(f["pc"], f["sp"]) for f in native[:len(ours)]], (walk["frames"], native[:count])
    assert all(f["method"] == "frame-pointer" for f in walk["frames"][1:])
    if STOPS[index] == "goroutine":
        assert len(ours) == count >= 4
        assert walk["stop_reason"] == "outermost" and "runtime.goexit+4" in walk["stop_detail"], walk
    else:
        assert walk["frames"][-1]["function"] == "runtime.main" and len(ours) == count - 1, walk["frames"]
        assert walk["stop_reason"] == "cfa-not-increasing" and "x29=" in walk["stop_detail"], walk


def test_go_arm64_stack_growth_call_is_before_the_frame():
    """The block Go's `b.ls` branches to (spills, `mov x3, x30`, bl runtime.morestack_noctxt,
    reloads, `b start`) runs before the frame is set up though it lies after the body: at each
    of its instructions up to the bl, the frame-pointer source finds the caller in x30, as GDB
    does at the entry (pc is moved there from the entry: the check only compares)."""
    binary = build_go("goroutine.go", goarch="arm64")
    actions = [("load", "cmd", "source %s" % STEPPER), ("tail", "py", "growth_tail()")]
    with qemu_user("qemu-aarch64", binary, (), options=QEMU_OPTIONS) as address:
        results, transcript = run_gdb(binary, actions, breakpoint="*'main.work'", gdb_program="gdb-multiarch",
                                      remote=address, timeout=300)
    tail = results["tail"]
    assert isinstance(tail, dict) and "at" in tail and len(tail["at"]) >= 3, (tail, transcript[-3000:])
    assert all(caller == tail["truth"] for caller in tail["at"].values()), tail
    frames = tail["in_morestack"]
    assert frames[0][0].startswith("runtime.morestack") and frames[1][0] == "main.work", frames
    # After the bl the return address is in x3, which nothing records: no guess past main.work.
    assert len(frames) == 2 or frames[2][1:] == tail["truth"], frames
