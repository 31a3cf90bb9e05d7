"""The unwinder's per-pc plans (plugin/plans.py) give what the full engine gives, on every frame.

With `set unwind claim all` GDB's `bt` takes every frame it can from the
plugin. Each scenario's whole stack is read from GDB (pc, sp and every
general register of every frame, as GDB's `info registers` would show
them) with plans off (the engine decides each frame) and with plans on,
twice (the second walk replays plans made by the first). They must be
equal, and plans must have been replayed. With the answers kept for the stop
(gdb_unwinder/stop_answers.py) the second walk is answered from them: equal too.
"""

import shutil

import pytest

from gdb_actions import SIGNAL, claim_all, claimed
from gdbrun import run_gdb
from support import build
from test_transcripts import FIXED_SEEDS, FLAGS

DEFINE = "\n".join([
    "python",
    "def stack_registers():",
    "    names = ['rax', 'rbx', 'rcx', 'rdx', 'rsi', 'rdi', 'rbp', 'rsp'] + ['r%d' % i for i in range(8, 16)] + ['rip']",
    "    out, frame = [], gdb.newest_frame()",
    "    while frame is not None:",
    "        values = []",
    "        for name in names:",
    "            value = frame.read_register(name)",
    "            values.append(None if value.is_optimized_out else str(value))",
    "        out.append([len(out), int(frame.type()), frame.pc(), values])",   # its level (GDB 10: no level())
    "        frame = frame.older()",
    "    return out",
    "def with_plans(on, stop_answers=False):",
    "    gdb._unwind_plugin_state.use_plans = on",
    "    gdb._unwind_plugin_state.use_stop_answers = stop_answers",   # off: every walk replays the plans
    "    gdb.invalidate_cached_frames()",
    "    return on",
    "end",
])
HITS = "gdb._unwind_plugin_state.inferior().plans.hits"
# frames answered from the stop's answers, and from answers computed ahead
ANSWERED = "[gdb._unwind_plugin_state.unwinder.memo.hits, gdb._unwind_plugin_state.inferior().plans.fast_hits]"
SCENARIOS = {"recurse": ["recurse", "300"], "alloca": ["alloca", "40"], "realign": ["realign", "24"],
             "signal": ["signal"], "qsort": ["qsort"]}


def _compare(program, args, breakpoint, setup=()):
    results, _ = run_gdb(program, [
        ("define", "cmd", DEFINE),
        claim_all(),
        ("off", "py", "with_plans(False)"),
        ("engine", "py", "stack_registers()"),
        claimed(),
        ("on", "py", "with_plans(True)"),
        ("first", "py", "stack_registers()"),
        ("again", "py", "with_plans(True)"),
        ("second", "py", "stack_registers()"),
        ("hits", "py", HITS),
    ], args=args, breakpoint=breakpoint, setup=list(setup) + SIGNAL + ["set backtrace past-main on"])
    assert results["claimed"] > 3, results["claimed"]           # the plugin unwound these frames
    assert len(results["engine"]) > 4
    assert results["first"] == results["engine"]
    assert results["second"] == results["engine"]
    assert results["hits"] > 0
    return results


@pytest.mark.parametrize("flags", sorted(FLAGS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_plans_equal_the_engine_on_fixtures(scenario, flags):
    results = _compare(build("chain.c", FLAGS[flags]), SCENARIOS[scenario], "stop_here")
    if scenario == "recurse":
        assert results["hits"] >= 300      # every recursive frame after the first is a replay


def test_plans_equal_the_engine_on_python3():
    """A varied real stack: Debian's python3 (interpreter and libc frames) stopped in getpid."""
    program = shutil.which("python3", path="/usr/bin")
    if program is None:
        pytest.fail("python3 is not installed")
    _compare(program, ["-c", "\"import os; f = lambda n: list(map(f, [n - 1])) if n else os.getpid(); f(40)\""],
             "getpid", setup=FIXED_SEEDS + ["set breakpoint pending on"])


@pytest.mark.parametrize("scenario", ["recurse", "qsort"])
def test_stop_answers_equal_the_engine(scenario):
    """GDB builds its frames again at the same stop (invalidate_cached_frames): the answers kept
    for the stop (and the answers computed ahead from the claims they give again) give every
    frame's registers as the engine does, and no frame is judged again."""
    results, _ = run_gdb(build("chain.c", FLAGS["O2"]), [
        ("define", "cmd", DEFINE),
        claim_all(),
        ("off", "py", "with_plans(False)"),
        ("engine", "py", "stack_registers()"),
        ("on", "py", "with_plans(True, True)"),
        ("first", "py", "stack_registers()"),
        ("hits0", "py", ANSWERED),
        ("again", "py", "with_plans(True, True)"),
        ("second", "py", "stack_registers()"),
        ("hits", "py", ANSWERED),
    ], args=SCENARIOS[scenario], breakpoint="stop_here", setup=SIGNAL + ["set backtrace past-main on"])
    assert len(results["engine"]) > 4
    assert results["first"] == results["engine"]
    assert results["second"] == results["engine"]
    memo, fast = (after - before for before, after in zip(results["hits0"], results["hits"]))
    normal = sum(1 for _, kind, _, _ in results["engine"] if kind == 0)     # inline frames ask no unwinder
    assert memo > 0 and memo + fast >= normal - 1, (memo, fast, normal)


def test_stack_write_drops_the_page_cache():
    """The unwinder reads the stack through a page cache: a write into the stack (GDB's
    memory-changed event) must drop it, so the next `bt` sees the new return address."""
    binary = build("chain.c", ["-O0"])
    slot = "int(gdb.newest_frame().older().older().read_register('sp')) - 8"    # frame 1's return address
    results, _ = run_gdb(binary, [
        claim_all(),
        ("before", "frames", None),
        ("slot", "py", slot),
        ("write", "cmd", "python gdb.execute('set {long}%d = 0' % (" + slot + "))"),
        ("after", "frames", None),
        claimed(),
    ], args=["plain"], breakpoint="stop_here")
    assert len(results["before"]) >= 4 and results["claimed"] >= 2
    assert [f["pc"] for f in results["after"]][:2] == [f["pc"] for f in results["before"]][:2]
    assert len(results["after"]) == 3 and results["after"][2]["pc"] == 0, results["after"]
