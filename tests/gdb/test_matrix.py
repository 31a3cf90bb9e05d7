"""The frames-added matrix (tests/helpers/matrix.py), row by row.

Each row runs the program without tables (and some without symbols; one is
Debian's own /usr/bin/sleep; two open a core of the plain build without the executable,
x86_64 and aarch64: the latter a core Linux wrote under qemu-system-aarch64) under
GDB (natively, or the aarch64 and arm32 builds under qemu-user with gdb-multiarch)
and under LLDB (natively, or LLDB 22/19 attached to qemu-user's gdbstub);
the truth is GDB's own backtrace of the twin that keeps its tables.
Asserted for every row:

- the plugin's walk (`unwind backtrace`, GDB and LLDB) and GDB's `bt`, as
  loaded and with `set unwind fallback on`, give every frame of the truth,
  pc and stack pointer, through `main` (`thread_main` on a thread's stack);
- with the plugin, GDB never has fewer right frames than GDB alone (default
  settings and fallback on), and the plugin's LLDB walk never fewer than
  LLDB alone.

The counts are saved for docs/matrix.md's table (tests/.build/matrix-results.json;
`python tests/helpers/matrix.py --update-readme` writes it; a run of some rows, `-k i386`,
replaces theirs and keeps the others'). i386 runs natively (gcc -m32; LLDB 16 as for x86_64),
arm32 (Thumb-2 and Arm, static) under qemu-arm (LLDB 22's gdb-remote, as aarch64). arm32's signal
rows are sigstop.c raising SIGUSR1 (dynamic, qemu-arm -L): under qemu-arm GDB's own walk through
glibc's restorer is wrong, so their truth is qemu's shadow call stack and a frame is right by its
pc (tests/helpers/matrix_signal.py). The table's last column, LLDB 22's `bt` as loaded, comes from
tests/lldb/test_lldb_provider_matrix.py. About 4 minutes for all rows here (50 rows, 3 debugger
sessions each).
"""
from __future__ import annotations

import pytest

import matrix
from matrix import Row, run_row

ROWS = matrix.rows()
_RESULTS = {}
# Columns short of the truth, and why; the test asserts exactly these counts, so a change shows.
KNOWN_GAPS = {}     # none now: the arm32 signal rows' gap (qemu-arm's uc_flags) is closed by gdb_unwinder/sigtramp.py

# LLDB 22's bt as loaded, by pc, where it is short of the truth: LLDB's own unwinder gives a wrong
# frame there (its list does not end where it goes wrong), and the provider keeps LLDB's frames.
# Every other row's LLDB 22 bt is whole.
LLDB22_SHORT = {
    "aarch64 plain -O2, no symbols": 1, "aarch64 signal -O2, no symbols": 1, "aarch64 signal -O0": 4,
    "aarch64 plain -O0, no symbols": 1, "aarch64 signal -O0, no symbols": 1, "arm32 Arm plain -O0": 4,
}


@pytest.fixture(scope="module", autouse=True)
def saved_results():
    yield
    if _RESULTS:
        matrix.save([_RESULTS[row.name] for row in ROWS if row.name in _RESULTS])


def _describe(frames):
    return [(hex(f["pc"]), hex(f["sp"]) if f.get("sp") is not None else None,
             f.get("name") or f.get("function"), f.get("method")) for f in frames[:12]]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_row(row: Row):
    result, columns = run_row(row)
    _RESULTS[row.name] = result
    counts, truth = result.counts, result.truth
    assert truth >= 3, _describe(columns["truth"])
    for column in ("gdb_default", "gdb_walk", "gdb_fallback", "lldb_walk"):
        if counts[column] is None:
            continue
        if (row.name, column) in KNOWN_GAPS:
            assert counts[column] == KNOWN_GAPS[row.name, column], (column, counts[column])
            continue
        assert counts[column] == truth, "%s: %d of %d right\nplugin: %s\ntruth: %s" % (
            column, counts[column], truth, _describe(columns[column]), _describe(columns["truth"]))
    assert counts["gdb_default"] >= counts["gdb_alone"]
    assert counts["gdb_fallback"] >= counts["gdb_alone"]
    if counts["lldb_alone"] is not None:
        assert counts["lldb_walk"] >= counts["lldb_alone"]
    if counts.get("lldb22_bt") is not None:     # LLDB 22's bt as loaded (by pc) keeps what LLDB alone had
        assert counts["lldb22_bt"] >= counts["lldb_alone"], (counts, _describe(columns["lldb22_bt"]))
        assert counts["lldb22_bt"] == LLDB22_SHORT.get(row.name, truth), (counts, _describe(columns["lldb22_bt"]))


def test_signal_frame_is_explained_and_compare_agrees_there():
    """At the frame a signal trampoline starts, `unwind explain` names the trampoline and how it
    was recognised, and `unwind compare` agrees with GDB's own frames through the signal frame."""
    row = Row("x86_64", "matrix.c", "O0", "signal")      # no tables; GDB alone is right here
    _, binary = matrix.binaries(row)
    results = matrix.run_at_row(row, binary, [
        ("walk", "json", "unwind backtrace -json"),
        ("explain", "json", "unwind explain -json all"),
        ("compare", "json", "unwind compare -json"),
    ])
    frames = results["walk"]["frames"]
    level = next(f["level"] for f in frames if f["signal_frame"])
    explained = {f["level"]: f for f in results["explain"]["frames"]}
    trampoline = explained[level]
    assert trampoline["function"] == "__restore_rt"
    assert any("signal trampoline" in note and "rt_sigreturn" in note for note in trampoline["evidence"]["notes"]), trampoline
    interrupted = explained[level + 1]
    assert "'S' augmentation" in " ".join(interrupted["evidence"]["notes"]), interrupted
    rows = {r["level"]: r for r in results["compare"]["frames"]}
    for at in range(level + 2):
        assert rows[at]["agrees"], rows[at]
