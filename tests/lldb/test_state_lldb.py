"""States that are hard for unwinders, in the real LLDB (issue 19 items 1, 2; issue 21 item 1).

Fixture: tests/fixtures/state.c (see tests/gdb/test_state_gdb.py for GDB).
Oracle: LLDB's own frames of the stopped thread (physical: inlined frames
folded), pc and sp. LLDB goes on past `_start` repeating it with a higher
sp (nothing called `_start`): those repeats are dropped.
"""

import re

import pytest

import lldbrun
from lldbrun import physical, run_lldb
from support import build, pcs_sps

BUILDS = {"O0": ["-O0"], "O1": ["-O1"]}
WALK = "unwind backtrace --json"

# Set a breakpoint right after clone3's `syscall` (found in its code), run to
# it, and select a thread that stopped there with rax != 0: the parent.
CLONE3_START = "target.FindSymbols('clone3')[0].GetSymbol().GetStartAddress().GetLoadAddress(target)"
AFTER_SYSCALL = ("target.BreakpointCreateByAddress(%s + bytes(process.ReadMemory(%s, 64, lldb.SBError()))"
                 ".index(b'\\x0f\\x05') + 2).GetID()" % (CLONE3_START, CLONE3_START))
PARENTS = ("[t for t in process if t.GetStopReason() == lldb.eStopReasonBreakpoint and "
           "t.GetFrameAtIndex(0).FindRegister('rax').GetValueAsUnsigned() != 0]")
TO_PARENT = ("([process.Continue() for _ in range(3) if not %s], "
             "process.SetSelectedThread(%s[0]))[1]" % (PARENTS, PARENTS))
CHILDREN = PARENTS.replace("!= 0]", "== 0]")
TO_CHILD = ("([process.Continue() for _ in range(3) if not %s], "
            "process.SetSelectedThread(%s[0]))[1]" % (CHILDREN, CHILDREN))


def stop_after_clone3(binary, select_side):
    """Stop right after clone3's syscall on the side select_side picks: its rax, the walk, LLDB's frames."""
    return run_lldb(binary, [
        ("bp", "py", AFTER_SYSCALL),
        ("go", "cmd", "process continue"),
        ("side", "py", select_side),
        ("rax", "py", "process.GetSelectedThread().GetFrameAtIndex(0).FindRegister('rax').GetValueAsUnsigned()"),
        ("walk", "json", WALK),
        ("native", "frames", None),
    ], args=["thread"], breakpoint="main")


def lldb_frames(frames):
    out = physical(frames)
    while len(out) > 1 and out[-1]["function"] == out[-2]["function"] == "_start":
        out.pop()
    return out


def assert_same_frames(results, transcript, lldb_stops_early=()):
    """The plugin's walk equals LLDB's frames; on the versions named in
    lldb_stops_early, LLDB's own unwinder gives up early, and its frames are
    the start of the plugin's walk."""
    walk, native = results["walk"], lldb_frames(results["native"])
    ours = pcs_sps(walk["frames"])
    if lldbrun.version() in lldb_stops_early:
        assert ours[:len(native)] == pcs_sps(native), (native, transcript[-3000:])
        return
    assert len(native) >= 3, transcript[-3000:]
    assert ours == pcs_sps(native), (walk["stop_detail"], native, transcript[-3000:])


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_parent_side_of_clone3_walks_to_start(flags_name):
    results, transcript = stop_after_clone3(build("state.c", BUILDS[flags_name]), TO_PARENT)
    assert results["rax"] > 0, transcript[-3000:]
    # LLDB 19 stops at clone3 (no FDE covers its pc; 16 and 22 go on)
    assert_same_frames(results, transcript, lldb_stops_early=(19,))
    frames = results["walk"]["frames"]
    assert frames[0]["function"] in ("clone3", "__clone3") and frames[-1]["function"] == "_start"
    assert results["walk"]["stop_reason"] == "outermost"


def test_child_side_of_clone3_is_outermost_by_its_registers():
    """The new thread starts at the same instruction, after clone3's syscall, with
    rax = 0: nothing above its sp is a frame, and the stop line says why."""
    results, transcript = stop_after_clone3(build("state.c", BUILDS["O1"]), TO_CHILD)
    assert results["rax"] == 0, transcript[-3000:]
    walk = results["walk"]
    assert len(walk["frames"]) == 1 and walk["stop_reason"] == "outermost", walk
    assert re.match(r"child side of (__)?clone3: pc 0x", walk["stop_detail"]), walk["stop_detail"]
    assert "rax = 0" in walk["stop_detail"]
    assert pcs_sps(walk["frames"]) == pcs_sps(physical(results["native"])[:1])


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
@pytest.mark.parametrize("mode", ["null", "wild"])
def test_call_through_a_bad_function_pointer(mode, flags_name):
    binary = build("state.c", BUILDS[flags_name])
    results, transcript = run_lldb(binary, [
        ("walk", "json", WALK),
        ("native", "frames", None),
    ], args=[mode], breakpoint=None)
    assert_same_frames(results, transcript)
    frames = results["walk"]["frames"]
    assert frames[0]["pc"] == {"null": 0, "wild": 0x10000}[mode]
    assert frames[1]["function"] == "call_through"


def test_signal_stack_above_the_interrupted_stack():
    binary = build("state.c", BUILDS["O1"])
    results, transcript = run_lldb(binary, [
        ("handle", "cmd", "process handle SIGILL -s false -n false -p true"),
        ("go", "cmd", "process continue"),          # from the SIGILL stop into the handler
        ("walk", "json", WALK),
        ("native", "frames", None),
    ], args=["altstack"], breakpoint="stop_here")
    assert_same_frames(results, transcript)
    names = [f["function"] for f in results["walk"]["frames"]]
    assert names[:5] == ["stop_here", "on_sigill", "__restore_rt", "faulter", "before_fault"], names


STACKS = {"execstack": ["-O1", "-Wl,-z,execstack"], "noexecstack": ["-O1", "-Wl,-z,noexecstack"]}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_trap_handler_named_in_lldb_is_looked_up_at_its_exact_pc(stack):
    """tests/fixtures/planted.c: planted_leaf "returns" to planted_trampoline's
    first instruction. Named in target.trap-handler-names, LLDB 19 and 22 and
    the plugin look it up at its pc and find main (LLDB 16 backs up into
    filler whatever the setting says, and stops); unnamed, the plugin never
    takes the stack address filler's row reads for code, even when the stack
    is executable."""
    binary = build("planted.c", STACKS[stack])
    results, transcript = run_lldb(binary, [
        ("walk", "json", WALK),
        ("native", "frames", None),
        ("clear", "cmd", "settings clear target.trap-handler-names"),
        ("unnamed", "json", WALK),
    ], breakpoint="planted_leaf", setup=["settings set target.trap-handler-names planted_trampoline"])
    assert_same_frames(results, transcript, lldb_stops_early=(16,))
    names = [f["function"] for f in results["walk"]["frames"]]
    assert names[:3] == ["planted_leaf", "planted_trampoline", "main"], names
    unnamed = results["unnamed"]
    assert [f["function"] for f in unnamed["frames"]] == ["planted_leaf", "filler"]
    assert unnamed["stop_reason"] == "return-address-not-code", unnamed["stop_detail"]
