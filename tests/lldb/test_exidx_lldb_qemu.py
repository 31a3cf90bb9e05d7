"""The `exidx` source in LLDB: ehabi.cpp for 32-bit Arm under `qemu-arm -g PORT`, LLDB's `gdb-remote`.

Oracle: LLDB's own physical frames (pc, sp) from SBThread (an inlined
frame and the function it is inlined into are one), against the plugin's
`unwind backtrace --json --sources exidx` at the same stop, for every
frame LLDB shows that has an .ARM.exidx entry (LLDB 16 goes on through
_start, whose entry is EXIDX_CANTUNWIND, where the plugin's walk stops).
"""

import json

import pytest

from lldbrun import run_batch
from qemu_arm import BUILDS, arm_program, qemu_arm

NATIVE = "NATIVE="


def _walks(binary, mode):
    with qemu_arm(binary, [mode]) as address:
        status, transcript = run_batch(binary, [
            "gdb-remote %s" % address,
            "breakpoint set -n stop_here",
            "continue",
            # Physical frames: a frame whose callee is an inlined frame is that same frame.
            "script import json; fr = list(lldb.thread.frames); print('%s' + json.dumps("
            "[[f.GetPC(), f.GetSP(), f.GetFunctionName()] for i, f in enumerate(fr) "
            "if i == 0 or not fr[i - 1].IsInlined()]))" % NATIVE,
            "unwind backtrace --json --sources exidx",
        ], timeout=300)
    assert status == 0, transcript
    native = json.loads(transcript.rsplit(NATIVE, 1)[1].splitlines()[0])   # the last one: not the echo
    text = transcript.split("unwind backtrace --json --sources exidx", 1)[1]
    ours = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    return native, ours, transcript


@pytest.mark.parametrize("mode", ["plain", "alloca", "throw"])
@pytest.mark.parametrize("name", ["arm-O0", "thumb-O2", "arm-O2-fp"])
def test_walk_equals_lldb(name, mode):
    native, ours, transcript = _walks(arm_program(BUILDS[name]), mode)
    names = [(n or "").lstrip(":").split("(")[0] for _, _, n in native]     # LLDB: "::stop_here(int)"
    assert names[0] == "stop_here" and "main" in names, transcript
    frames = ours["frames"]
    assert ours["stop_reason"] == "no-unwind-info" and "EXIDX_CANTUNWIND" in ours["stop_detail"]
    assert [(f["pc"], f["sp"]) for f in frames] == [(pc, sp) for pc, sp, _ in native[:len(frames)]], transcript
    assert len(frames) >= names.index("main") + 1
    assert all(f["method"] == "exidx" for f in frames[1:])
