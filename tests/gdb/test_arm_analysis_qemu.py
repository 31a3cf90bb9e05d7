"""The `analysis` source on 32-bit Arm live: ehabi.cpp under `qemu-arm -g PORT`, gdb-multiarch.

Oracle: GDB's own frames (the plugin's unwinder disabled) on the same
binary, which has .ARM.exidx and .debug_frame: the tables are GDB's, the
plugin reads only the code (`-sources analysis`: no table at all). For Arm
and Thumb-2 code at -O0 and -O2, with and without frame pointers, in every
mode of the fixture (alloca: vsp from r7/r11; float: vpush; varargs; a big
frame; a destructor run while an exception is in flight), every frame GDB
shows down to main must be the plugin's, by (pc, sp), each recovered by
`analysis` with the instruction behind each rule in its evidence.

EXIDX_CANTUNWIND means "read the code": stopped inside the personality
routine, under libgcc's CANTUNWIND ___Unwind_RaiseException, `-sources
exidx,analysis` goes on to main as GDB does. Without symbols (--strip-all)
a function starts where its .ARM.exidx entry does (where the linker merged
identical entries, at the target of the call that reached it).
"""

import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from qemu_arm import BUILDS, arm_program, qemu_arm
from support import build, need_tool

MODES = ["plain", "alloca", "float", "varargs", "big", "throw"]


def _run(binary, mode, sources, breakpoint="stop_here"):
    with qemu_arm(binary, [mode]) as address:
        return run_gdb(binary, [
            ("ours", "json", "unwind backtrace -json -sources %s" % sources),
            ("explain", "json", "unwind explain -json -sources %s all" % sources),
            *native_frames(),
        ], breakpoint=breakpoint, gdb_program="gdb-multiarch", remote=address, timeout=300)


def _pc_sp(frames):
    return [(f["pc"], f["sp"]) for f in frames]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_analysis_alone_equals_gdb(name, mode):
    results, transcript = _run(arm_program(BUILDS[name]), mode, "analysis")
    native = results["native"]
    assert native[0]["name"] == "stop_here" and native[-1]["name"] == "main", transcript
    ours = results["ours"]["frames"]
    assert _pc_sp(ours)[:len(native)] == _pc_sp(native), transcript
    assert all(f["method"] == "analysis" for f in ours[1:len(native)])
    for frame in results["explain"]["frames"][1:len(native)]:
        notes = " ".join(frame["evidence"]["notes"])
        assert "CFA=" in notes and ("lr=" in notes or "pc=" in notes), notes


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_exidx_cantunwind_is_left_to_the_code(name):
    """Inside the personality routine, libgcc's hand-written ___Unwind_RaiseException is
    EXIDX_CANTUNWIND: with `-sources exidx,analysis` the walk goes on from it by reading its
    code, and equals GDB's to main; the explanation says the table marks the function as not
    unwindable by exceptions and that the code decided."""
    results, transcript = _run(arm_program(BUILDS[name]), "throw", "exidx,analysis",
                               breakpoint="__gxx_personality_v0")
    native = results["native"]
    names = [f["name"] for f in native]
    assert names[0] == "__gxx_personality_v0" and "__cxa_throw" in names and names[-1] == "main", transcript
    ours = results["ours"]["frames"]
    assert _pc_sp(ours)[:len(native)] == _pc_sp(native), transcript
    level = names.index("___Unwind_RaiseException") + 1
    assert ours[level]["method"] == "analysis" and ours[level]["function"] == "__cxa_throw", ours[level]
    assert [f["method"] for f in ours[1:len(native)] if f is not ours[level]] == ["exidx"] * (len(native) - 2)
    explained = results["explain"]["frames"][level]
    notes = " ".join(explained["evidence"]["notes"])
    assert "EXIDX_CANTUNWIND" in notes and "not unwindable by exceptions" in notes and "code decided" in notes
    [tried] = [a for a in explained["attempts"] if a["source"] == "exidx"]
    assert tried["outcome"] == "failed" and "EXIDX_CANTUNWIND" in tried["reason"] \
        and "its code decides" in tried["reason"], tried


def _stripped(name):
    need_tool("arm-linux-gnueabihf-objcopy")
    return build("ehabi.cpp", ["-funwind-tables", "-static", *BUILDS[name]], name="ehabi-arm-stripped",
                 compiler="arm-linux-gnueabihf-g++",
                 post=[["arm-linux-gnueabihf-objcopy", "--strip-all", "{out}"]])


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_without_symbols_functions_start_at_their_exidx_entries(name):
    """The program stripped of its symbols: each function's start is the start of the .ARM.exidx
    entry covering its pc. Oracle: GDB's frames on the unstripped twin (the same code; the
    stacks' heights differ with the programs' names, so sp is compared relative to frame 0's)."""
    twin = arm_program(BUILDS[name])
    truth, transcript = _run(twin, "plain", "analysis")
    native = truth["native"]
    assert [f["name"] for f in native[:2]] == ["stop_here", "level3"], transcript
    results, transcript = _run(_stripped(name), "plain", "analysis", breakpoint="*0x%x" % native[0]["pc"])
    ours = results["ours"]["frames"]
    relative = lambda frames: [(f["pc"], f["sp"] - frames[0]["sp"]) for f in frames]
    assert relative(ours)[:len(native)] == relative(native), transcript
    by = []
    for frame in results["explain"]["frames"][1:len(native)]:
        entry = frame["evidence"]["entry"]
        by.append(entry["start_by"])
        assert entry["function"] is None, entry
        if entry["start_by"] == "table":
            assert "the .ARM.exidx entry" in frame["evidence"]["notes"][0], frame["evidence"]["notes"]
    # the linker merges identical neighbouring entries: a function inside a merged range is not
    # reached from the entry's start, and the call that reached it gives its start instead
    assert set(by) <= {"table", "call"} and by.count("table") >= 2, by
