"""32-bit x86 live in GDB: chain.c built with `gcc -m32` (Debian's multilib), run natively.

Oracle: GDB's own frames (the plugin's unwinder disabled, `backtrace
past-main` on), compared by (pc, sp).

- `cfi`: at -O0, -O2 and -O2 -fomit-frame-pointer, stops in our code
  (plain, alloca, a SIGUSR1 handler with the vdso's sigreturn trampoline
  between, qsort's callback) and in libc itself (getpid called from
  qsort's callback): the plugin's walk equals GDB's, down to _start, and
  GDB's bt with the plugin claiming every frame it can (`set unwind claim
  all`) is GDB's own.
- `frame-pointer` and `scan`: the same builds with .eh_frame removed. GDB
  loses the chain there, so the truth is GDB's frames on the twin with
  tables (DESIGN, "frames it adds"); the two runs' stacks sit at different
  heights (the program's path differs), so sp is compared relative to the
  innermost frame's. At the qsort stop the scan meets stale return
  addresses left by earlier code (after calls to the pc thunk, and into
  ld.so from lazy binding, between qsort and sort_some) and skips them
  with the reason in the evidence; GDB alone loses that chain.
"""

import pytest

from gdb_actions import SIGNAL, claimed_then_native
from gdbrun import run_gdb
from i386_programs import BUILDS, STRIP, pc_sp, program, stops

STOPS = stops(SIGNAL)
PAST_MAIN = ["set backtrace past-main on"]


@pytest.mark.parametrize("stop", sorted(STOPS))
@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_cfi_walk_equals_gdb(flags_name, stop):
    args, breakpoint, setup, innermost = STOPS[stop]
    results, transcript = run_gdb(program(flags_name), [
        ("arch", "py", "gdb.selected_frame().architecture().name()"),
        ("ours", "json", "unwind backtrace -json -sources cfi"),
        ("auto_bt", "cmd", "bt full"),
        ("auto_frame", "cmd", "frame 1\ninfo frame\nframe 0"),
        *claimed_then_native("claimed", count="count"),
        ("native_bt", "cmd", "bt full"),
        ("native_frame", "cmd", "frame 1\ninfo frame\nframe 0"),
    ], args=args, breakpoint=breakpoint, setup=PAST_MAIN + setup)
    assert results["arch"] == "i386", transcript
    native, ours = results["native"], results["ours"]
    assert native[0]["name"] == innermost and native[-1]["name"] == "_start", transcript
    assert pc_sp(ours["frames"]) == pc_sp(native), transcript
    assert all(f["method"] == "cfi" for f in ours["frames"][1:])
    assert ours["stop_reason"] == "outermost", ours["stop_detail"]
    if stop == "signal":
        assert any(f["signal_frame"] for f in ours["frames"]), ours["frames"]
    # Promise 1: with the default claim policy GDB prints what it prints alone.
    assert results["auto_bt"] == results["native_bt"] and results["auto_frame"] == results["native_frame"]
    assert "Saved registers:" in results["native_frame"], results["native_frame"]
    # GDB's bt built from the plugin's frames is GDB's own.
    assert results["count"] >= len(native) - 2, results["count"]
    assert pc_sp(results["claimed"]) == pc_sp(native), transcript


def _relative(frames):
    sp0 = frames[0]["sp"]
    return [(f["pc"], f["sp"] - sp0) for f in frames]


@pytest.mark.parametrize("stop", ["plain", "alloca", "qsort"])
@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_fallbacks_equal_gdb_on_the_twin_with_tables(flags_name, stop):
    args, breakpoint, setup, _ = STOPS[stop]
    truth, transcript = run_gdb(program(flags_name), [("native", "frames", None)],
                                args=args, breakpoint=breakpoint, setup=PAST_MAIN)
    results, stripped_transcript = run_gdb(program(flags_name, STRIP, "chain-i386-noeh"), [
        ("ours", "json", "unwind backtrace -json -sources frame-pointer,scan"),
        ("explain", "cmd", "unwind explain -sources frame-pointer,scan all"),
    ], args=args, breakpoint=breakpoint, setup=PAST_MAIN)
    native = truth["native"]
    frames = results["ours"]["frames"]
    mains = [i for i, f in enumerate(native) if f["name"] == "main"]
    assert mains, transcript
    upto = mains[0] + 1
    assert _relative(frames)[:upto] == _relative(native)[:upto], stripped_transcript
    methods = [f["method"] for f in frames[1:upto]]
    if stop == "qsort":
        # libc's qsort frames keep no frame records, so they are scanned; the
        # stale return addresses on the way (the pc thunk's, ld.so's lazy
        # binding's) are skipped with the reason in the evidence.
        assert set(methods) <= {"frame-pointer", "scan"} and "scan" in methods, methods
        assert "skipped [sp+0x" in results["explain"] and "follows a call to " in results["explain"], \
            results["explain"]
    elif flags_name == "O0":
        # Frame records: every frame of ours is followed by its ebp chain.
        assert set(methods) == {"frame-pointer"}, methods
    elif stop == "plain":
        # gcc -m32 -O2 keeps no frame records: stop_here's first instruction
        # (the return address at [esp]), then the stack is scanned.
        assert methods[0] == "frame-pointer" and set(methods[1:]) == {"scan"}, methods
        assert all(f["found_by"].startswith("stack scan: return address at [esp+0x")
                   for f in frames[2:upto]), frames
