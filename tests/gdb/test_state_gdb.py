"""States that are hard for unwinders, in the real GDB (issue 19 items 1, 2; issue 21 item 1).

Fixture: tests/fixtures/state.c. Oracle: GDB's own frames (pc, sp), taken
with the plugin's unwinder disabled. At every stop the plugin's walk
(`unwind backtrace -json`) must list the same physical frames, and GDB's
`bt` with the plugin loaded must equal GDB's `bt` without it.
"""

import re

import pytest

from gdb_actions import claim_all, native_frames
from gdbrun import run_gdb
from support import build, pcs_sps

BUILDS = {"O0": ["-O0"], "O1": ["-O1"]}
WALK = "unwind backtrace -json"


def native_and_plugin(binary, args, prelude, setup=(), breakpoint=None):
    """(plugin walk, GDB's frames with the plugin, GDB's frames alone, transcript) at the stop prelude reaches."""
    actions = list(prelude) + [
        ("walk", "json", WALK),
        ("with_plugin", "frames", None),
        claim_all("claim_all"),
        ("flush_all", "cmd", "maintenance flush register-cache"),
        ("with_plugin_all", "frames", None),
        *native_frames(),
    ]
    setup = ["set backtrace past-main on"] + list(setup)
    results, transcript = run_gdb(binary, actions, args=args, setup=setup, breakpoint=breakpoint)
    return results, transcript


def assert_same_frames(results, transcript):
    walk = results["walk"]
    native = results["native"]
    assert len(native) >= 3, transcript[-3000:]
    assert pcs_sps(walk["frames"]) == pcs_sps(native), (walk["stop_detail"], transcript[-3000:])
    assert pcs_sps(results["with_plugin"]) == pcs_sps(native)
    assert pcs_sps(results["with_plugin_all"]) == pcs_sps(native), results["with_plugin_all"]


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_parent_side_of_clone3_walks_to_start(flags_name):
    binary = build("state.c", BUILDS[flags_name])
    results, transcript = native_and_plugin(binary, ["thread"], [
        ("returned", "cmd", "continue"),           # the entry stop, then the return in the parent
        ("thread", "py", "gdb.selected_thread().num"),
        ("rax", "py", "int(gdb.parse_and_eval('$rax'))"),
    ], setup=["catch syscall 435"])       # clone3: GDB 10's syscall table has no such name
    assert re.search(r"returned from syscall (clone3|435)", transcript), transcript[-3000:]
    assert results["thread"] == 1 and results["rax"] > 0      # the parent: rax is the child's id
    assert_same_frames(results, transcript)
    frames = results["walk"]["frames"]
    assert frames[0]["function"] in ("clone3", "__clone3", "__GI___clone3")
    assert frames[-1]["function"] == "_start"
    assert results["walk"]["stop_reason"] == "outermost"
    assert "undefined" in results["walk"]["stop_detail"]      # _start's table, not a name


CLONE3 = "int(gdb.parse_and_eval('(unsigned long) &__clone3'))"
AFTER_SYSCALL = ("gdb.execute('break *%%d' %% (%s + bytes(gdb.selected_inferior().read_memory(%s, 64))"
                 ".index(b'\\x0f\\x05') + 2), to_string=True)" % (CLONE3, CLONE3))
# continue until a thread stops there with rax == 0 (both the parent and the child do)
TO_CHILD = ("[gdb.execute('continue', to_string=True) for _ in range(3) "
            "if int(gdb.parse_and_eval('$rax')) != 0]")


def test_child_side_of_clone3_is_outermost_by_its_registers():
    """The new thread starts after clone3's syscall with rax = 0: nothing above its
    sp is a frame, and the stop line says why."""
    binary = build("state.c", BUILDS["O1"])
    results, transcript = run_gdb(binary, [
        ("break", "py", AFTER_SYSCALL),
        ("child", "py", TO_CHILD),
        ("rax", "py", "int(gdb.parse_and_eval('$rax'))"),
        ("thread", "py", "gdb.selected_thread().num"),
        ("walk", "json", WALK),
        ("native", "frames", None),
    ], args=["thread"], breakpoint="main")
    assert results["rax"] == 0 and results["thread"] == 2, transcript[-3000:]
    walk = results["walk"]
    assert len(walk["frames"]) == 1 and walk["stop_reason"] == "outermost", walk
    assert walk["stop_detail"].startswith("child side of clone3: pc 0x"), walk["stop_detail"]
    assert "rax = 0" in walk["stop_detail"]
    assert pcs_sps(walk["frames"]) == pcs_sps(results["native"][:1])


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
@pytest.mark.parametrize("mode", ["null", "wild"])
def test_call_through_a_bad_function_pointer(mode, flags_name):
    binary = build("state.c", BUILDS[flags_name])
    results, transcript = native_and_plugin(binary, [mode], [
        ("explain", "json", "unwind explain -json 1"),
    ])
    assert_same_frames(results, transcript)
    frames = results["walk"]["frames"]
    assert frames[0]["pc"] == {"null": 0, "wild": 0x10000}[mode]
    assert frames[1]["function"] == "call_through"
    evidence = results["explain"]["frames"][0]["evidence"]
    if frames[1]["method"] == "frame-pointer":
        assert evidence["found_by"] == "frame pointer: call to a non-code address"
        assert any("null or bad function pointer" in note for note in evidence["notes"]), evidence["notes"]
    assert frames[-1]["function"] == "_start"


def test_signal_stack_above_the_interrupted_stack():
    """A thread's sigaltstack lies above its stack; SIGILL in faulter, whose row at
    pc-1 (CFA=rsp+8) is not its row at pc (CFA=rsp+1104). Crossing the signal
    frame lowers the CFA: the walk goes on (issue 21 item 1), and GDB's bt with
    the plugin claiming every frame stays GDB's."""
    binary = build("state.c", BUILDS["O1"])
    results, transcript = native_and_plugin(binary, ["altstack"], [
        ("explain", "json", "unwind explain -json 4"),   # frame 4 from faulter's row
    ], setup=["handle SIGILL nostop noprint pass"], breakpoint="stop_here")
    assert_same_frames(results, transcript)
    frames = results["walk"]["frames"]
    names = [f["function"] for f in frames]
    assert names[:5] == ["stop_here", "on_sigill", "__restore_rt", "faulter", "before_fault"], names
    assert frames[2]["signal_frame"] and frames[3]["sp"] < frames[2]["sp"]      # the stack switched
    assert names[-1] in ("clone3", "__clone3") and results["walk"]["stop_reason"] == "outermost"
    evidence = results["explain"]["frames"][0]["evidence"]
    assert evidence["lookup_pc"] == frames[3]["pc"]         # faulter at its exact pc
    assert evidence["row"].startswith("CFA=rsp+1104")


STACKS = {"execstack": ["-O1", "-Wl,-z,execstack"], "noexecstack": ["-O1", "-Wl,-z,noexecstack"]}


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_trap_handler_is_looked_up_at_its_exact_pc(stack):
    """tests/fixtures/planted.c (see tests/lldb/test_state_lldb.py). GDB alone looks
    planted_trampoline up at pc-1 (in filler) and lists a stack address as a
    frame; with `set unwind trap-handler-names planted_trampoline` the plugin's
    walk and GDB's bt with the plugin go from planted_trampoline to main, as
    LLDB does. Unnamed, the plugin stops rather than take a stack address for code."""
    binary = build("planted.c", STACKS[stack])
    results, transcript = run_gdb(binary, [
        ("unnamed", "json", WALK),
        ("name", "cmd", "set unwind trap-handler-names planted_trampoline"),
        ("show", "cmd", "show unwind trap-handler-names"),
        ("walk", "json", WALK),
        ("with_plugin", "frames", None),
        *native_frames(),
    ], breakpoint="*planted_leaf", setup=["set backtrace past-main on"])
    assert results["show"].strip() == "Functions looked up as trap handlers: planted_trampoline."
    walk = results["walk"]["frames"]
    assert [f["function"] for f in walk[:3]] == ["planted_leaf", "planted_trampoline", "main"]
    # GDB's bt with the plugin: the same pcs and sps as the plugin's walk
    assert pcs_sps(results["with_plugin"]) == pcs_sps(walk), transcript[-3000:]
    # GDB alone: a stack address where main should be
    native = results["native"]
    assert pcs_sps(native)[:2] == pcs_sps(walk)[:2] and native[2]["pc"] == walk[1]["sp"] + 8   # E-16
    unnamed = results["unnamed"]
    assert [f["function"] for f in unnamed["frames"]] == ["planted_leaf", "filler"]
    assert unnamed["stop_reason"] == "return-address-not-code", unnamed["stop_detail"]
