"""LLDB 22's own `bt` with the plugin as loaded, on the frames-added matrix's x86_64 and i386 programs.

The truth is the matrix's: GDB's own backtrace of the twin that keeps its
tables (tests/helpers/matrix.py). For each program LLDB 22 stops once and
shows its frames as loaded (the frame provider on, `guesses off`), the
plugin's walk, its frames with `unwind settings guesses on`, and with
`unwind provider off` (LLDB alone).
Asserted: the provider never loses a frame LLDB alone had right; every
frame it supplies is one of the plugin's walk, before its first guessed
frame; `unwind backtrace` is the same with the provider on and off; with guesses on, `bt` has
every frame (but where LLDB's own unwinder gives a wrong frame, LLDB_WRONG_FRAME: exact counts). The
counts (right frames from the innermost, by pc) are printed, and the one as loaded is saved for
docs/matrix.md's "LLDB 22 `bt` (as loaded)" column (tests/.build/matrix-lldb22-bt.json;
`python tests/helpers/matrix.py --update-readme` writes it).
"""
from __future__ import annotations

import pytest

import matrix
from lldbrun import physical, run_lldb, version
from plugin.settings import is_guess

PROVIDER_VERSION = 22
# Rows where LLDB 22's own unwinder gives a wrong frame, which the provider keeps (it adds the
# plugin's frames only where LLDB's unwinder stops): (right frames as loaded, with guesses on).
LLDB_WRONG_FRAME = {
    "i386 signal -O2": (6, 6),                # LLDB's frame 6 is 0x...8ff4 (in .got), not main
    "i386 plain -O2, no symbols": (1, 1),     # LLDB's frame 1 is libc's, past the four callers
    "i386 signal -O2, no symbols": (1, 1),
}
ROWS = [row for row in matrix.rows() if row.arch in matrix.NATIVE_FLAGS and not row.core]     # x86_64, i386


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_lldb_bt_as_loaded_gets_the_proven_frames(row):
    twin, binary = matrix.binaries(row)
    results, _ = run_lldb(binary, [
        ("loaded", "frames", None),
        ("walk_on", "json", "unwind backtrace --json"),
        ("guesses", "cmd", "unwind settings guesses on"),
        ("guessed", "frames", None),
        ("no_guesses", "cmd", "unwind settings guesses off"),
        ("off", "cmd", "unwind provider off"),
        ("alone", "frames", None),
        ("walk_off", "json", "unwind backtrace --json"),
    ], args=[row.mode] if row.mode else [], breakpoint=matrix._breakpoint(row))
    if version() < PROVIDER_VERSION:        # no provider: `bt` is LLDB's own, the command says why
        assert not results["off"]["ok"] and "needs LLDB 22" in results["off"]["error"], results["off"]
        assert results["loaded"] == results["alone"]
        return
    truth = matrix.truth_frames(row, twin) or matrix.gdb_columns(row, binary)["truth"]     # JIT: GDB's session
    loaded, alone = physical(results["loaded"]), physical(results["alone"])
    walk = results["walk_on"]["frames"]
    assert results["walk_on"] == results["walk_off"]
    proven = next((f["level"] for f in walk if is_guess(f["method"])), len(walk))
    ranges = matrix.function_ranges(twin, row.arch)
    bias = matrix._pie_bias(truth, ranges)
    guessed = physical(results["guessed"])
    counts = tuple(matrix.right_by_pc(frames, truth, ranges, bias) for frames in (alone, loaded, guessed, walk)) + (len(truth),)
    print("MATRIX-LLDB22 %s alone=%d loaded=%d guesses-on=%d walk=%d truth=%d proven=%d %s" % (
        (row.name,) + counts + (proven, [f["method"] for f in walk])))
    assert loaded[:len(alone)] == alone, (loaded, alone)
    # Every supplied frame is the plugin's, before its first guess.
    supplied = [f["pc"] for f in loaded[len(alone):]]
    assert supplied == [f["pc"] for f in walk[len(alone):len(alone) + len(supplied)]], (supplied, walk)
    assert len(alone) + len(supplied) <= max(proven, len(alone)), (supplied, proven)
    assert counts[1] >= counts[0]
    matrix.save_provider_count(row, counts[1])         # docs/matrix.md's "LLDB 22 `bt` (as loaded)" column
    assert counts[3] == len(truth), counts
    if row.name in LLDB_WRONG_FRAME:        # LLDB's own wrong frame is kept: exactly these counts
        assert counts[1:3] == LLDB_WRONG_FRAME[row.name], counts
        return
    # With guesses on, LLDB's bt has every frame of the plugin's walk that LLDB alone lacks.
    assert counts[2] == counts[3] == len(truth), counts
