"""Runs inside GDB (tests/gdb/transcripts.py starts it): one stop, a fixed list of commands, a transcript.

The plan comes in UNWIND_TRANSCRIPT_PLAN (JSON): {"checkout", "plugin": bool, "setup": [cmd...],
"program", "args", "breakpoint", "ignore": N, "frames": N, "extra": [cmd...], "finish": bool, "out"}.
The transcript is every command and its output, in order; GDB runs it the same
way with and without the plugin, so the two can be compared line by line.
"""

import json
import os
import shlex

import gdb

plan = json.loads(os.environ["UNWIND_TRANSCRIPT_PLAN"])
lines = []


def run(command):
    try:
        text = gdb.execute(command, to_string=True)
    except gdb.error as exc:
        text = "error: %s\n" % exc
    lines.append("(gdb) %s\n%s" % (command, text))
    return text


def depth(limit):
    count, frame = 0, gdb.newest_frame()
    while frame is not None and count < limit:
        count += 1
        frame = frame.older()
    return count


try:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    gdb.execute("set width 0")
    gdb.execute("set breakpoint pending on")     # libc's functions exist once it is loaded
    # The plan differs between the two sessions: keep it out of the program's
    # environment, or the stacks would not be laid out alike.
    gdb.execute("unset environment UNWIND_TRANSCRIPT_PLAN")
    if plan["plugin"]:
        gdb.execute("source %s/gdb_unwinder/gdbinit.py" % plan["checkout"])
    for command in plan.get("setup", []):
        gdb.execute(command, to_string=True)
    gdb.execute("file %s" % plan["program"], to_string=True)
    gdb.execute("break %s" % plan["breakpoint"], to_string=True)
    if plan.get("ignore"):
        gdb.execute("ignore 1 %d" % plan["ignore"], to_string=True)
    run("run %s" % " ".join(shlex.quote(a) for a in plan.get("args", [])))
    run("bt full")
    levels = depth(plan.get("frames", 64))
    for level in range(levels):
        run("frame %d" % level)
        run("info frame")
        run("info args")
        run("print $pc")
        run("print $sp")
    run("frame 0")
    for step in range(1, min(levels, 6)):
        run("up")
        run("info locals")
    run("frame 0")
    for command in plan.get("extra", []):
        run(command)
    if plan.get("finish"):
        run("finish")
        run("bt")
except Exception as exc:        # the transcript says what went wrong; the test compares it
    lines.append("driver error: %s: %s\n" % (type(exc).__name__, exc))

with open(plan["out"], "w") as handle:
    handle.write("".join(lines))
try:
    gdb.execute("kill", to_string=True)
except gdb.error:               # the program already exited
    pass
