"""Sourced into GDB by tests (tests/gdb/test_runtimes.py): single-step and, at every
instruction, put the plugin's caller (frame-pointer source) beside GDB's own."""

import json

import gdb


def step_trace(steps, sources="frame-pointer"):
    """[{pc, ours: [pc, sp] of frame 1 or None, theirs: [pc, sp] of GDB's frame 1}] after each stepi."""
    out = []
    for _ in range(steps):
        gdb.execute("stepi", to_string=True)
        walk = json.loads(gdb.execute("unwind backtrace -json -sources %s 2" % sources, to_string=True))
        frames = walk["frames"]
        gdb.execute("disable unwinder global unwind-plugin", to_string=True)
        try:
            newest = gdb.newest_frame()
            older = newest.older()
            theirs = [older.pc(), int(older.read_register("sp"))] if older is not None else None
            out.append({"pc": newest.pc(), "theirs": theirs,
                        "ours": [frames[1]["pc"], frames[1]["sp"]] if len(frames) > 1 else None,
                        "stop": walk.get("stop_detail")})
        finally:
            gdb.execute("enable unwinder global unwind-plugin", to_string=True)
    return out
