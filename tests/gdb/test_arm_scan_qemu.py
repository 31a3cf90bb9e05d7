"""The stack scan alone on 32-bit Arm: Thumb return addresses (bit 0 set, after a 32-bit `bl`/`blx`
or a 16-bit `blx rm`) and Arm ones are taken (issue 33, item 4).

tests/fixtures/arm_leaves.cpp built static for Thumb-2 and Arm at -O0 under
qemu-arm, stopped in its leaf under a recursion. Oracle: GDB's own frames
on the same program (it keeps .debug_frame). With `set unwind sources scan`
the plugin's walk must give callers GDB shows, in GDB's order (the scan may
skip a caller whose return address is only in lr), and at least half of
GDB's frames up to main.
"""
import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from qemu_arm import qemu_arm
from support import build, need_tool

BUILDS = {"thumb-O0": ["-mthumb", "-O0"], "arm-O0": ["-marm", "-O0"]}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_scan_takes_thumb_and_arm_return_addresses(name):
    binary = build("arm_leaves.cpp", ["-static", *BUILDS[name]], name="arm_leaves",
                   compiler=need_tool("arm-linux-gnueabihf-g++"))
    with qemu_arm(binary, ["recurse"]) as address:
        results, transcript = run_gdb(binary, [
            ("sources", "cmd", "set unwind sources scan"),
            ("ours", "json", "unwind backtrace -json"),
            *native_frames(),
        ], breakpoint="leaf", gdb_program="gdb-multiarch", remote=address, timeout=300)
    native = [f["pc"] for f in results["native"]]
    main = [f["name"] for f in results["native"]].index("main")
    ours = [f["pc"] for f in results["ours"]["frames"]]
    found = [pc for pc in ours[1:] if pc in native[:main + 1]]
    print(name, "scan found %d of GDB's %d callers to main" % (len(found), main), [hex(p) for p in ours],
          [hex(p) for p in native])
    assert found == sorted(found, key=native.index), transcript          # GDB's order
    assert all(pc in native for pc in ours[1:len(found) + 1]), transcript   # nothing invented before them
    assert native[main] in ours and len(found) * 2 >= main, transcript
