"""Runs inside GDB (exec'd by tests/gdb/test_state_stepping.py): step one
instruction at a time and, after each step, record GDB's own physical frames
(the plugin's unwinder disabled) and the plugin's walk (plugin.api.walk)."""

import gdb

import plugin.api as unwind


def gdb_frames():
    out, frame = [], gdb.newest_frame()
    while frame is not None and len(out) < 64:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            out.append([frame.pc(), int(frame.read_register("sp")), frame.type() == gdb.SIGTRAMP_FRAME])
        frame = frame.older()
    return out


def trace(steps):
    """[{pc, gdb: [[pc, sp, sigtramp]...], plugin: [[pc, sp, cfa, method]...], stop}] for `steps` steps."""
    records = []
    for _ in range(steps):
        gdb.execute("stepi", to_string=True)
        if not gdb.selected_inferior().pid:
            break
        walk = unwind.walk()
        records.append({"pc": int(gdb.parse_and_eval("$pc")), "gdb": gdb_frames(),
                        "plugin": [[f["pc"], f["sp"], f["cfa"], f["method"]] for f in walk["frames"]],
                        "stop": walk["stop_reason"], "detail": walk["stop_detail"],
                        "function": walk["frames"][0]["function"], "module": walk["frames"][0]["module"]})
    return records
