"""Sourced into GDB by tests (tests/gdb/test_runtimes.py): single-step and, at every
instruction, put the plugin's caller (frame-pointer source) beside GDB's own."""

import json
import re

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


def growth_tail():
    """At the entry of a Go function: its caller as GDB finds it ("truth"); the plugin's caller
    (frame-pointer source) with pc moved to each instruction of the block its stack-bound check
    branches to, up to its call of runtime.morestack ("at", by offset); and, after stepping into
    that call, the plugin's first three frames ("in_morestack": function, pc, sp)."""
    start = gdb.newest_frame().pc()                     # stopped at the function's entry
    newest = gdb.newest_frame()
    older = newest.older()
    out = {"truth": [older.pc(), int(older.read_register("sp"))], "at": {}}
    insns = newest.architecture().disassemble(start, gdb.block_for_pc(start).end - 1)
    check = next(i for i in insns if i["asm"].startswith(("jbe", "b.ls")))
    target = int(re.search(r"0x[0-9a-f]+", check["asm"]).group(0), 16)
    call = next(i["addr"] for i in insns if i["addr"] > target and "morestack" in i["asm"])
    for insn in insns:
        if target <= insn["addr"] <= call:
            gdb.execute("set $pc = %d" % insn["addr"])
            walk = json.loads(gdb.execute("unwind backtrace -json -sources frame-pointer 2", to_string=True))
            out["at"][insn["addr"] - start] = [walk["frames"][1]["pc"], walk["frames"][1]["sp"]]
    gdb.execute("stepi", to_string=True)
    walk = json.loads(gdb.execute("unwind backtrace -json -sources frame-pointer 3", to_string=True))
    out["in_morestack"] = [[f["function"], f["pc"], f["sp"]] for f in walk["frames"]]
    return out
