"""The matrix's judging: how many frames of a column are the truth's (tests/helpers/matrix.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List, Tuple

from support import need_tool

def function_ranges(twin: Path, arch: str) -> List[Tuple[int, int, str]]:
    """(start, end, name) of the twin's functions (nm), for "same function" at an interrupted pc."""
    from matrix import CROSS, NATIVE_FLAGS      # the builds' tools (matrix imports this module)
    nm = need_tool("nm" if arch in NATIVE_FLAGS else CROSS[arch][0] + "nm")
    out = subprocess.run([nm, "-S", "--defined-only", str(twin)], capture_output=True, text=True).stdout
    ranges = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            start, size = int(parts[0], 16) & ~1, int(parts[1], 16)       # bit 0: Thumb code
            ranges.append((start, start + size, parts[3]))
    return ranges


def _in_function(twin, arch, stop_here):
    """The twin's function at a run-time pc (its load bias from stop_here's run-time address)."""
    ranges = function_ranges(twin, arch)
    bias = stop_here - next(start for start, _, name in ranges if name == "stop_here")
    return lambda pc: _function_at(pc & ~1, ranges, bias)


def _function_at(pc, ranges, bias):
    for start, end, name in ranges:
        if start + bias <= pc < end + bias:
            return name
    return None


def right_frames(frames: List[dict], truth: List[dict], ranges, bias=0) -> int:
    """How many frames from the innermost are the truth's (pc, sp relative to the innermost frame)."""
    if not frames or not truth:
        return 0
    base, truth_base = frames[0]["sp"], truth[0]["sp"]
    count = 0
    for level, expected in enumerate(truth):
        if level >= len(frames):
            break
        got = frames[level]
        if got.get("sp") is None:
            break
        interrupted = level > 0 and truth[level - 1].get("type") == SIGTRAMP_FRAME
        if interrupted:
            # The kernel aligns the signal frame's parts (its xsave area to 64
            # bytes), so the shift between runs may change across it: the
            # frames above it are compared relative to the interrupted one.
            if got["sp"] <= frames[level - 1]["sp"] and expected["sp"] > truth[level - 1]["sp"]:
                break
            base, truth_base = got["sp"], expected["sp"]
        if got["sp"] - base != expected["sp"] - truth_base:
            break
        if got["pc"] != expected["pc"]:
            same = interrupted and _function_at(got["pc"], ranges, bias) == _function_at(expected["pc"], ranges, bias)
            if not same or _function_at(got["pc"], ranges, bias) is None:
                break
        count += 1
    return count


SIGTRAMP_FRAME = 4          # gdb.SIGTRAMP_FRAME


def right_by_pc(frames: List[dict], truth: List[dict], ranges, bias=0) -> int:
    """How many frames from the innermost have the truth's pc (LLDB 22's provider supplies frames
    without a stack pointer of their own); in the frame a signal interrupted, its function (the
    signal's arrival varies)."""
    count = 0
    for level, (got, expected) in enumerate(zip(frames, truth)):
        if got["pc"] != expected["pc"]:
            interrupted = level > 0 and truth[level - 1].get("type") == SIGTRAMP_FRAME
            function = _function_at(got["pc"], ranges, bias)
            if not interrupted or function is None or function != _function_at(expected["pc"], ranges, bias):
                break
        count += 1
    return count


def _pie_bias(truth, ranges):
    """The load bias of a position-independent twin: its anchor's pc against nm's addresses."""
    anchor = truth[-1]
    name = anchor.get("name")
    for start, end, symbol in ranges:
        if symbol == name:
            for bias in (0, 0x555555554000, 0x5555555000, 0x4000000000, 0x56555000):
                if start + bias <= anchor["pc"] < end + bias:
                    return bias
    return 0


