"""The matrix's arm32 signal rows: tests/fixtures/sigstop.c under qemu-arm, judged by pcs.

sigstop.c raises SIGUSR1 (its plain sa_handler calls stop_here). It is built
dynamically against Debian's armhf cross libc (qemu-arm -L SYSROOT), with -g,
then its .debug_frame removed: its code and .ARM.exidx are what the plugin
reads, as on Debian (the builder tests/emulated/test_signal_arm_i386.py uses
too). GDB's own walk under qemu-arm goes astray after glibc's restorer, so the
truth is qemu's shadow call stack (tests/helpers/shadow_stack.py), which has
pcs, not stack pointers: a column's frame is right when its pc is the truth's
(the innermost frame: any pc in stop_here, where each debugger stops after its
own reading of the prologue). The signal trampoline's pc is the address the
handler returns to: `lr` on entry to the handler, read by GDB at a breakpoint
there (a register, not an unwind).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from qemu_arm import SYSROOT
from shadow_stack import SIGNAL, shadow_stack
from support import build, need_tool

# sigstop.c's Arm builds: flags by name (Thumb-2 or Arm, -O2 or -O0)
ARM_SIGSTOP_BUILDS = {"thumb-O2": ["-O2", "-mthumb"], "arm-O2": ["-O2", "-marm"],
                      "thumb-O0": ["-O0", "-mthumb"], "arm-O0": ["-O0", "-marm"]}
SIGTRAMP_FRAME = 4          # gdb.SIGTRAMP_FRAME


def arm_sigstop(name: str, debug_frame: bool = False) -> Path:
    """sigstop.c for armhf (dynamic), with -g; its .debug_frame removed unless debug_frame."""
    need_tool("arm-linux-gnueabihf-gcc")
    post = None if debug_frame else [["arm-linux-gnueabihf-objcopy", "--remove-section", ".debug_frame", "{out}"]]
    return build("sigstop.c", ["-g", *ARM_SIGSTOP_BUILDS[name]], name="sigstop-" + name + ("-twin" if debug_frame else ""),
                 compiler="arm-linux-gnueabihf-gcc", post=post)


def shadow_truth(addresses: Dict[str, int], twin: Path, anchor: str, in_function) -> List[dict]:
    """The truth's frames from qemu's shadow call stack: stop_here, then every caller's pc (a
    signal: the trampoline at `addresses["restorer"]`, then the interrupted pc), through `anchor`.
    addresses: stop_here's and the restorer's run-time addresses (GDB's session);
    in_function(pc): the twin's function at a run-time pc."""
    oracle = shadow_stack(need_tool("qemu-arm"), SYSROOT, twin, [], addresses["stop_here"])
    if oracle is None or [kind for _, kind in oracle].count(SIGNAL) != 1:
        raise AssertionError("qemu's shadow call stack has no single signal: %s" % oracle)
    frames = [{"pc": addresses["stop_here"], "sp": None, "name": "stop_here", "type": 0}]
    for address, kind in oracle:
        if kind == SIGNAL:
            frames.append({"pc": addresses["restorer"] & ~1, "sp": None, "name": None, "type": SIGTRAMP_FRAME})
        frames.append({"pc": address, "sp": None, "name": in_function(address), "type": 0})
        if frames[-1]["name"] == anchor:
            return frames
    raise AssertionError("no %s in qemu's shadow call stack: %s" % (anchor, [hex(a) for a, _ in oracle]))


def right_pcs(frames: List[dict], truth: List[dict], in_function) -> int:
    """How many frames from the innermost have the truth's pc (bit 0, Thumb's, ignored); the
    innermost one: any pc in the truth's function."""
    count = 0
    for level, (got, expected) in enumerate(zip(frames, truth)):
        if level == 0:
            if in_function(got["pc"] & ~1) != expected["name"]:
                break
        elif got["pc"] & ~1 != expected["pc"] & ~1:
            break
        count += 1
    return count
