"""32-bit x86 live in LLDB: chain.c built with `gcc -m32`, launched natively.

Oracle: LLDB's own physical frames (pc, sp) and its register values.

- The i386 register map (lldb_commands/native.py reads each DWARF
  register by the arch's names): the plugin's registers of frame 0 are
  LLDB's eax..eip, every one of them.
- `cfi` at -O0, -O2 and -O2 -fomit-frame-pointer, stops in our code
  (plain, a SIGUSR1 handler, qsort's callback) and in libc (getpid):
  the plugin's walk equals LLDB's frames down to _start.
- `frame-pointer` and `scan` with .eh_frame removed, at the plain and the
  qsort stops: equal to LLDB's frames on the twin with tables, sp relative to the innermost frame's (the two
  programs' paths differ, so their stacks sit at different heights).
"""

import pytest

from lldbrun import physical, run_lldb
from i386_programs import BUILDS, STRIP, pc_sp, program, stops

SIGNAL = ["process handle SIGUSR1 -s false -p true -n false"]
STOPS = {name: stop for name, stop in stops(SIGNAL).items() if name != "alloca"}
I386_REGISTERS = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"]
LLDB_REGISTERS = ("{r.GetName(): r.GetValueAsUnsigned() for s in frame.GetRegisters() for r in s "
                  "if r.GetName() in %r}" % (I386_REGISTERS,))


@pytest.mark.parametrize("stop", sorted(STOPS))
@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_i386_cfi_walk_equals_lldb(flags_name, stop):
    args, breakpoint, setup, innermost = STOPS[stop]
    results, transcript = run_lldb(program(flags_name), [
        ("triple", "py", "target.GetTriple()"),
        ("frames", "frames", None),
        ("ours", "json", "unwind backtrace --json --sources cfi"),
        ("explain", "json", "unwind explain --json 0"),
        ("lldb_registers", "py", LLDB_REGISTERS),
    ], args=args, breakpoint=breakpoint, setup=setup)
    assert results["triple"].startswith("i386-"), results["triple"]
    # The register map: every i386 register, LLDB's value.
    ours_registers = results["explain"]["frames"][0]["registers"]
    assert sorted(results["lldb_registers"]) == sorted(I386_REGISTERS)
    assert {name: ours_registers[name] for name in I386_REGISTERS} == results["lldb_registers"]
    theirs = physical(results["frames"])
    assert theirs[0]["function"].endswith(innermost) and theirs[-1]["function"] == "_start", transcript
    frames = results["ours"]["frames"]
    assert pc_sp(frames) == pc_sp(theirs), transcript
    assert all(f["method"] == "cfi" for f in frames[1:])
    assert results["ours"]["stop_reason"] == "outermost"
    if stop == "signal":
        assert any(f["signal_frame"] for f in frames), frames


def _relative(frames):
    return [(f["pc"], f["sp"] - frames[0]["sp"]) for f in frames]


@pytest.mark.parametrize("stop", ["plain", "qsort"])
@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_i386_fallbacks_equal_lldb_on_the_twin_with_tables(flags_name, stop):
    truth, _ = run_lldb(program(flags_name), [("frames", "frames", None)], args=[stop])
    results, transcript = run_lldb(program(flags_name, STRIP, "chain-i386-noeh"), [
        ("ours", "json", "unwind backtrace --json --sources frame-pointer,scan"),
    ], args=[stop])
    theirs = physical(truth["frames"])
    upto = [f["function"] for f in theirs].index("main") + 1
    frames = results["ours"]["frames"]
    assert _relative(frames)[:upto] == _relative(theirs)[:upto], transcript
    methods = {f["method"] for f in frames[2:upto]}
    if stop == "qsort":
        # libc's qsort frames keep no frame records: scanned, past the stale
        # return addresses that earlier code left (GDB's test checks the reasons).
        assert methods <= {"frame-pointer", "scan"} and "scan" in methods, frames
    else:
        assert methods == ({"frame-pointer"} if flags_name == "O0" else {"scan"}), frames
