"""`unwind backtrace`'s fast path (lldb_commands/fast.py) walks exactly as the engine does.

`unwind backtrace --json` goes through the per-pc plans; `unwind explain
all --json` through engine.step_frame for every frame. Frame by frame they
must give the same pc, sp, CFA, method, found-by words, function and
module, and the same stop reason and detail: on the project's programs
(a recursion with and without frame pointers, libc's qsort, a signal
handler, a thread, JIT code) and on real Debian programs nobody here wrote
(ls, python3, bash), each stopped in libc's write. The second backtrace
(plans made by the first) must be the same again.
"""

import pytest

from lldbrun import run_lldb
from support import build

FIELDS = ("level", "pc", "sp", "cfa", "method", "found_by", "function", "module", "signal_frame")

CASES = {   # name: (program, args, breakpoint)
    "recurse-O0": (lambda: build("chain.c", ["-O0"]), ["recurse", "300"], "stop_here"),
    "recurse-O2-nofp": (lambda: build("chain.c", ["-O2", "-fomit-frame-pointer"]), ["recurse", "300"], "stop_here"),
    "qsort-O2": (lambda: build("chain.c", ["-O2"]), ["qsort"], "stop_here"),
    "signal-O0": (lambda: build("chain.c", ["-O0"]), ["signal"], "stop_here"),
    "thread-O2": (lambda: build("chain.c", ["-O2"]), ["thread"], "stop_here"),
    "jit-O0": (lambda: build("jit.c", ["-O0"]), [], "stop_here"),
    "ls": (lambda: "/bin/ls", ["-l", "/"], "write"),
    "python3": (lambda: "/usr/bin/python3", ["-c", "print(sum(range(10)))"], "write"),
    "bash": (lambda: "/bin/bash", ["-c", "f() { echo hi; }; f"], "write"),
}


def _frames(data):
    return [{key: frame[key] for key in FIELDS} for frame in data["frames"]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_backtrace_equals_the_engines_walk(case):
    program, args, breakpoint = CASES[case]
    results, _ = run_lldb(program(), [
        ("fast", "json", "unwind backtrace --json"),
        ("again", "json", "unwind backtrace --json"),
        ("engine", "json", "unwind explain all --json"),
    ], args=args, breakpoint=breakpoint)
    engine = results["engine"]
    assert len(engine["frames"]) >= 3, engine
    for walk in ("fast", "again"):
        fast = results[walk]
        assert _frames(fast) == _frames(engine), walk
        assert (fast["stop_reason"], fast["stop_detail"]) == (engine["stop_reason"], engine["stop_detail"]), walk


def test_a_memory_write_between_two_commands_is_seen():
    """The page cache lives for one command: `memory write` does not change the stop id."""
    write = ("debugger.HandleCommand(\"memory write -s 8 '$sp' 0x%x\" % thread.GetFrameAtIndex(2).GetPC())"
             " or process.GetStopID()")
    results, _ = run_lldb(build("chain.c", ["-O0"]), [
        ("stop_id", "py", "process.GetStopID()"),
        ("before", "json", "unwind backtrace --json"),
        ("write", "py", write),
        ("after", "json", "unwind backtrace --json"),
    ], args=["plain"])
    before, after = results["before"]["frames"], results["after"]["frames"]
    assert results["write"] == results["stop_id"]
    assert [f["function"] for f in before[:3]] == ["stop_here", "level3", "level2"], before
    # stop_here's return address (at sp: the stop is at its first instruction)
    # now points into level2, and so does frame #1.
    assert after[1]["pc"] == before[2]["pc"] != before[1]["pc"], (before[:3], after[:3])
