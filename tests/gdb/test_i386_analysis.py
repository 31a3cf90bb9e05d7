"""The `analysis` source on i386 in GDB: chain.c built with `gcc -m32`, its .eh_frame removed.

Oracle: GDB's own frames on the twin with tables (the same build, .eh_frame
kept): on the stripped program GDB loses the chain, so the truth is the
twin's (DESIGN, "frames it adds"). The two runs' stacks sit at different
heights, so sp is compared relative to the innermost frame's (past a
signal trampoline, to the interrupted frame's). The program's
frames have no table left: each must be recovered by `analysis` (libc keeps
its .eh_frame: `cfi` walks it), at -O0 (frame records), -O2 and -O2
-fomit-frame-pointer (none), through alloca, qsort's callback and a signal
handler. With `-sources analysis` alone (no table at all, libc included) the
plain stop's chain still reaches main.
"""

import pytest

from gdb_actions import SIGNAL
from gdbrun import run_gdb
from i386_programs import BUILDS, STRIP, program, stops

STOPS = stops(SIGNAL)
PAST_MAIN = ["set backtrace past-main on"]


def _relative(frames):
    """(pc, sp relative to the innermost frame's; past a signal trampoline, to the interrupted frame's:
    where the kernel puts a signal frame depends on the stack's alignment, which differs between runs)."""
    out, base = [], frames[0]["sp"]
    for level, f in enumerate(frames):
        if level and "sigreturn" in (frames[level - 1].get("name") or frames[level - 1].get("function") or ""):
            base = f["sp"]
        out.append((f["pc"], f["sp"] - base))
    return out


def _truth(flags_name, stop):
    args, breakpoint, setup, _ = STOPS[stop]
    truth, transcript = run_gdb(program(flags_name), [("native", "frames", None)],
                                args=args, breakpoint=breakpoint, setup=PAST_MAIN + setup)
    native = truth["native"]
    mains = [i for i, f in enumerate(native) if f["name"] == "main"]
    assert mains, transcript
    return native[:mains[0] + 1]


def _stripped(flags_name, stop, sources):
    args, breakpoint, setup, _ = STOPS[stop]
    results, transcript = run_gdb(program(flags_name, STRIP, "chain-i386-noeh"), [
        ("ours", "json", "unwind backtrace -json -sources %s" % sources),
        ("explain", "json", "unwind explain -json -sources %s all" % sources),
    ], args=args, breakpoint=breakpoint, setup=PAST_MAIN + setup)
    return results, transcript


@pytest.mark.parametrize("stop", ["plain", "alloca", "qsort", "signal"])
@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_analysis_equals_gdb_on_the_twin_with_tables(flags_name, stop):
    truth = _truth(flags_name, stop)
    results, transcript = _stripped(flags_name, stop, "cfi,analysis")
    frames = results["ours"]["frames"]
    upto = len(truth)
    assert _relative(frames)[:upto] == _relative(truth), transcript
    explained = results["explain"]["frames"]
    decided = 0
    for level in range(1, upto):
        module = frames[level - 1].get("module") or ""
        if module.startswith("chain-i386-noeh"):       # the callee's frame has no table: the code decided
            assert frames[level]["method"] == "analysis", (level, frames[level])
            notes = " ".join(explained[level]["evidence"]["notes"])
            assert "CFA=" in notes and "eip=[CFA-4]" in notes, notes
            decided += 1
    assert decided >= 2, [(f["function"], f["module"], f["method"]) for f in frames]


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_analysis_alone_reaches_main(flags_name):
    truth = _truth(flags_name, "plain")
    results, transcript = _stripped(flags_name, "plain", "analysis")
    frames = results["ours"]["frames"]
    assert _relative(frames)[:len(truth)] == _relative(truth), transcript
    assert [f["method"] for f in frames[1:len(truth)]] == ["analysis"] * (len(truth) - 1)
    assert [f["function"] for f in frames[:len(truth)]] == [f["name"] for f in truth]
