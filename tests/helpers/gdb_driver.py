"""Runs inside GDB (sourced by tests/helpers/gdbrun.py): load the plugin, stop, act, write JSON.

The plan comes in the UNWIND_TEST_PLAN environment variable:
{"checkout", "binary", "args", "breakpoint", "setup": [cmd...], "actions": [[name, kind, payload]...], "out",
 "remote": "HOST:PORT" or null (connect to a gdbstub and continue instead of run),
 "core": PATH or null (open this core without the executable instead of running it)}
kinds: "cmd" (output text), "json" (command output parsed as JSON), "frames" (GDB's
physical frames as [{pc, sp, type}]), "py" (a Python expression evaluated here).
"""

import json
import os
import sys

import gdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_actions import run_actions, session_error, write_results  # noqa: E402

plan = json.loads(os.environ["UNWIND_TEST_PLAN"])
results = {}


def physical_frames(limit=100000, include_all=False):
    out = []
    frame = gdb.newest_frame()
    while frame is not None and len(out) < limit:
        kind = frame.type()
        if include_all or kind not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            out.append({"pc": frame.pc(), "sp": int(frame.read_register("sp")), "type": kind,
                        "name": frame.name()})
        frame = frame.older()
    return out


try:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    gdb.execute("source %s/gdb_unwinder/gdbinit.py" % plan["checkout"])
    if plan.get("core"):        # a core without its executable: `gdb -c CORE`
        gdb.execute("core-file %s" % plan["core"])
    else:
        gdb.execute("file %s" % plan["binary"])
    if plan.get("remote"):
        gdb.execute("target remote %s" % plan["remote"])
    for command in plan.get("setup", []):
        gdb.execute(command)
    if plan.get("breakpoint"):
        gdb.execute("break %s" % plan["breakpoint"])
    if plan.get("remote"):
        gdb.execute("continue")
    elif not plan.get("core"):
        gdb.execute("run %s" % " ".join(plan.get("args", [])))
    run_actions(plan["actions"], {
        "cmd": lambda payload: gdb.execute(payload, to_string=True),
        "json": lambda payload: json.loads(gdb.execute(payload, to_string=True)),
        "frames": lambda payload: physical_frames(**(payload or {})),
        "py": lambda payload: eval(payload, globals()),
    }, results)
except Exception as exc:
    results["__error__"] = session_error(exc)

write_results(plan["out"], results)
if not plan.get("core"):
    gdb.execute("kill")
