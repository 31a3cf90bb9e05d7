"""Runs inside GDB (imported by an action of tests/gdb/test_exidx_qemu.py): step one function
from its first instruction to its return and take the `exidx` walk's caller at every pc.

The truth is known at the first instruction: the caller's pc is lr (Thumb bit dropped) and
its sp (the CFA) is sp. `nexti` steps over calls, so every pc is one of the function's own;
where GDB cannot unwind a callee (it decides "stepped into a subroutine" by unwinding), nexti
stops inside it, and the walk ends there.
"""

import json

import gdb


def _function(pc):
    """The name of the symbol holding pc (`info symbol`: "NAME + OFFSET in SECTION ...")."""
    text = gdb.execute("info symbol 0x%x" % pc, to_string=True)
    return text.split(" in section")[0].split(" + ")[0].strip()


def walk(limit=300):
    frame = gdb.selected_frame()
    lr = int(frame.read_register("lr")) & ~1
    sp = int(frame.read_register("sp")) & 0xFFFFFFFF
    function = _function(int(frame.pc()))
    steps = []
    for _ in range(limit):
        pc = int(gdb.selected_frame().pc())
        if pc == lr or _function(pc) != function:
            break       # returned, or nexti went into a callee GDB could not unwind (it stops there)
        out = json.loads(gdb.execute("unwind backtrace -json -sources exidx 2", to_string=True))
        frames = out["frames"]
        steps.append({"pc": pc, "caller": [frames[1]["pc"], frames[1]["sp"]] if len(frames) > 1 else None,
                      "stop_reason": out["stop_reason"], "stop_detail": out["stop_detail"]})
        gdb.execute("nexti", to_string=True)
    return {"truth": [lr, sp], "steps": steps, "returned": int(gdb.selected_frame().pc()) == lr}
