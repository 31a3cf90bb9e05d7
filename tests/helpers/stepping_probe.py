"""Runs inside GDB (exec'd by tests/gdb/test_state_stepping.py): step one
instruction at a time and, after each step, record GDB's own physical frames
(the plugin's unwinder disabled) and the plugin's walk (plugin.api.walk)."""

import gdb

import plugin.api as unwind


def physical_frames(limit=64):
    """GDB's physical frames (no inline or tail-call frames), newest first, at most limit."""
    frame, count = gdb.newest_frame(), 0
    while frame is not None and count < limit:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            yield frame
            count += 1
        frame = frame.older()


def gdb_frames():
    return [[frame.pc(), int(frame.read_register("sp")), frame.type() == gdb.SIGTRAMP_FRAME]
            for frame in physical_frames()]


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


CALLEE_SAVED = ("rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15")


def gdb_registers():
    """GDB's physical frames as [name, and CALLEE_SAVED's values (None: not available)]."""
    return [[frame.name()] + [_register(frame, name) for name in CALLEE_SAVED] for frame in physical_frames()]


def _register(frame, name):
    try:
        value = frame.read_register(name)
    except gdb.error:
        return None
    return None if value.is_optimized_out else int(value)


def claimed_trace(steps, claim):
    """For `steps` steps with `set unwind claim CLAIM`: [[pc, GDB's frames taken with the plugin's
    unwinder, GDB's frames without it]], and how many frames the unwinder claimed."""
    unwinder = gdb._unwind_plugin_state.unwinder
    before, records = unwinder.claimed, []
    gdb.execute("set unwind claim %s" % claim)
    for _ in range(steps):
        gdb.execute("stepi", to_string=True)
        if not gdb.selected_inferior().pid:
            break
        ours = gdb_registers()
        gdb.execute("disable unwinder global unwind-plugin", to_string=True)
        native = gdb_registers()
        gdb.execute("enable unwinder global unwind-plugin", to_string=True)
        records.append([int(gdb.parse_and_eval("$pc")), ours, native])
    return {"records": records, "claimed": unwinder.claimed - before}
