"""EHABI the only table: stops in EXIDX_CANTUNWIND code, the walk goes on by reading the code.

tests/fixtures/arm_leaves.cpp, built static with arm-linux-gnueabihf-g++ for
Thumb-2 and Arm at -O0 and -O2, then its .debug_frame removed (objcopy):
.ARM.exidx is the only table, and the noexcept leaf and its noexcept
callers have EXIDX_CANTUNWIND entries (merged by the linker with their
neighbours'). Stops: the leaf under a recursion, in std::sort's comparator,
called by a destructor while an exception is in flight, and in
__gxx_personality_v0 (libgcc's CANTUNWIND ___Unwind_RaiseException below
it). Oracle: GDB's own frames on the twin that keeps .debug_frame (the same
code: .text compared byte for byte), by (pc, sp relative to the innermost
frame's), every frame GDB shows (to main, or to _start where main made a
tail call). The plugin's
walk on the stripped program uses its default sources; every frame whose
callee's entry says CANTUNWIND must come from `analysis`.
"""

import subprocess

import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from qemu_arm import qemu_arm
from support import build, need_tool

BUILDS = {"thumb-O0": ["-mthumb", "-O0"], "thumb-O2": ["-mthumb", "-O2"],
          "arm-O0": ["-marm", "-O0"], "arm-O2": ["-marm", "-O2"]}
STOPS = {"recurse": ("recurse", "leaf"), "sort": ("sort", "leaf"), "throw": ("throw", "leaf"),
         "personality": ("throw", "__gxx_personality_v0")}
NO_DEBUG_FRAME = [["arm-linux-gnueabihf-objcopy", "--remove-section", ".debug_frame", "{out}"]]


def _program(name, post=None):
    need_tool("arm-linux-gnueabihf-objcopy")
    return build("arm_leaves.cpp", ["-static", *BUILDS[name]], name="arm_leaves" + ("-nodf" if post else ""),
                 compiler=need_tool("arm-linux-gnueabihf-g++"), post=post)


def _text(binary):
    return subprocess.run([need_tool("arm-linux-gnueabihf-objcopy"), "-O", "binary", "--only-section=.text",
                           str(binary), "/dev/stdout"], check=True, capture_output=True).stdout


def _gdb(binary, mode, breakpoint, actions):
    with qemu_arm(binary, [mode]) as address:
        return run_gdb(binary, actions, breakpoint=breakpoint, gdb_program="gdb-multiarch", remote=address,
                       timeout=300)


def _relative(frames):
    """(pc, sp relative to the innermost frame's): the programs' names differ, so do their stacks' heights."""
    return [(f["pc"], f["sp"] - frames[0]["sp"]) for f in frames]


@pytest.mark.parametrize("stop", sorted(STOPS))
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_walk_through_cantunwind_code_equals_gdb_on_the_twin(name, stop):
    mode, breakpoint = STOPS[stop]
    twin, stripped = _program(name), _program(name, NO_DEBUG_FRAME)
    assert _text(twin) == _text(stripped)
    truth, transcript = _gdb(twin, mode, breakpoint, native_frames())
    native = truth["native"]
    # GDB's bt ends at main, or (-O2: main tail-calls down and sort_some) at _start
    assert native[-1]["name"] in ("main", "_start") and len(native) >= 4, transcript
    results, transcript = _gdb(stripped, mode, breakpoint, [
        ("ours", "json", "unwind backtrace -json"),
        ("explain", "json", "unwind explain -json all"),
    ])
    ours = results["ours"]["frames"]
    assert _relative(ours)[:len(native)] == _relative(native), transcript
    explained = results["explain"]["frames"]
    decided = 0
    for level in range(1, len(native)):
        tried = [a for a in explained[level].get("attempts", []) if a["source"] == "exidx"]
        if tried and "EXIDX_CANTUNWIND" in tried[0]["reason"]:
            assert ours[level]["method"] == "analysis", (level, ours[level])
            assert "code decided" in " ".join(explained[level]["evidence"]["notes"])
            decided += 1
    assert decided >= 1
