"""The unwinder's fast claims (a FastRow replayed on the register file the previous claim
handed on, gdb_unwinder/unwinder.py _claim_fast) give GDB what the full engine gives.

With `set unwind claim all`, each scenario's stack is read from GDB (pc, sp and every
general register of every frame) with plans off (the engine decides each frame) and on;
they must be equal, and with plans on nearly every frame after the first claim must have
been a fast claim (so the comparison covers that path, not the slower replay).
"""

import shutil

import pytest

from gdbrun import run_gdb
from support import build
from test_plans_gdb import DEFINE
from test_transcripts import FIXED_SEEDS

PLANS = "gdb._unwind_plugin_state.inferior().plans"
CLAIMED = "gdb._unwind_plugin_state.unwinder.claimed"


def _compare(program, args, breakpoint, setup=()):
    results, _ = run_gdb(program, [
        ("define", "cmd", DEFINE),
        ("all", "cmd", "set unwind claim all"),
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
