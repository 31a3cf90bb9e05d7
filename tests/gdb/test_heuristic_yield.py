"""GDB's own heuristic unwinder, modelled (plugin/debugger_heuristic.py, plugin/arch/x86_64.py), and
the claim path yielding to it where the plugin only guesses.

1. The model is GDB's: on every x86_64 program of the frames-added matrix (their
   tables removed, some their symbols too; Debian's sleep; JIT code), for each of
   GDB's own frames that no table covers, the caller the model computes is the
   caller GDB found (pc and sp), garbage frames included.
2. tests/fixtures/heuristic_yield.c: at `stale` (no table) [rsp] holds a code
   address after a call in `decoy`. GDB alone shows a `decoy` frame there; with
   the plugin guessing (sources without `analysis`, fallback on) the scan finds
   `outer` instead, and the claim path declines, so GDB's bt is GDB's own, and
   `unwind explain` says why; with `analysis` on (not a guess) the plugin's exact
   answer is claimed and the decoy frame is gone.
"""

import pytest

import matrix
from gdbrun import run_gdb
from support import build

PROBE = "__import__('heuristic_probe').compare()"
GUESSING = "set unwind sources cfi,frame-pointer,scan"
ROWS = [row for row in matrix.rows() if row.arch == "x86_64"]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_model_gives_gdbs_own_callers_on_the_matrix_programs(row):
    _, binary = matrix.binaries(row)
    probe = matrix.run_at_row(row, binary, [("off", "cmd", "disable unwinder global unwind-plugin"),
                                      ("probe", "py", PROBE)])["probe"]
    modelled = [entry for entry in probe if entry["model"] is not None]
    assert modelled, probe
    wrong = [entry for entry in modelled if entry["model"] != entry["gdb"]]
    assert not wrong, wrong
    # where the model gives nothing (a frame at its `ret`, a realigned stack), GDB found a caller anyway
    assert len(modelled) >= len(probe) - 1, probe


def _frames(results, key):
    return [(f["pc"], f["sp"]) for f in results[key]]


def test_a_guess_yields_to_gdbs_own_plausible_caller():
    binary = build("heuristic_yield.c", ["-O2"])
    results, _ = run_gdb(binary, [
        ("off", "cmd", "disable unwinder global unwind-plugin"),
        ("alone", "frames", None),
        ("on", "cmd", "enable unwinder global unwind-plugin"),
        ("fallback", "cmd", "set unwind fallback on"),
        ("guessing", "cmd", GUESSING),
        ("flush", "cmd", "maintenance flush register-cache"),
        ("guessed", "frames", None),
        ("walk", "json", "unwind backtrace -json"),
        ("explain", "json", "unwind explain -json 1"),
        ("reading", "cmd", "set unwind sources cfi,analysis,frame-pointer,scan"),
        ("flush2", "cmd", "maintenance flush register-cache"),
        ("read", "frames", None),
    ])
    alone = results["alone"]
    assert [f["name"] for f in alone[:5]] == ["stop_here", "stale", "decoy", "outer", "main"], alone
    # guessing, the plugin's own walk finds outer (its scan skips the decoy's address) ...
    walk = results["walk"]["frames"]
    assert [f["function"] for f in walk[:4]] == ["stop_here", "stale", "outer", "main"], walk
    assert walk[2]["method"] == "scan"
    # ... but GDB's bt keeps GDB's own frames: the claim path declined stale's caller
    assert _frames(results, "guessed")[:5] == _frames(results, "alone")[:5]
    native = results["explain"]["frames"][0]["native"]
    assert "debugger's own heuristic gives another caller" in native["gdb_bt"], native
    assert "0x%x" % alone[2]["pc"] in native["gdb_bt"] and "prologue" in native["gdb_bt"], native
    # reading the code is no guess: the analysis' answer is claimed, the decoy frame is gone
    read = results["read"]
    assert [f["name"] for f in read[:4]] == ["stop_here", "stale", "outer", "main"], read
    assert (read[2]["pc"], read[2]["sp"]) == (walk[2]["pc"], walk[2]["sp"])
