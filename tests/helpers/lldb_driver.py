"""Runs under /usr/bin/python3 with LLDB's module (started by tests/helpers/lldbrun.py).

A standalone script driving LLDB through `import lldb`, the way a user's
script would: load the plugin with `command script import`, stop the
program, run commands, write every result as JSON.

The plan comes in the UNWIND_TEST_PLAN environment variable:
{"checkout", "binary", "args", "breakpoint", "setup": [cmd...], "launch": bool,
 "core": PATH (optional: load this core instead of launching), "actions": [[name, kind, payload]...], "out"}
kinds: "cmd" ({ok, output, error} of an LLDB command), "json" (a command's
output parsed as JSON, or {error}), "frames" (LLDB's frames of the selected
thread as [{pc, sp, cfa, function, inlined, artificial}]), "py" (a Python expression
evaluated here, with lldb, debugger, target, process, thread, frame).
"""

import json
import os

import lldb

from driver_actions import run_actions, session_error, write_results

plan = json.loads(os.environ["UNWIND_TEST_PLAN"])
results = {}
transcript = []         # every command and its output, for the test's traceback check


def command(line):
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(line, result)
    out = {"ok": result.Succeeded(), "output": result.GetOutput() or "", "error": result.GetError() or ""}
    transcript.append("(lldb) %s\n%s%s" % (line, out["output"], out["error"]))
    return out


def frames(limit=100000):
    thread = target.GetProcess().GetSelectedThread()
    out = []
    for index in range(min(thread.GetNumFrames(), limit)):
        f = thread.GetFrameAtIndex(index)
        out.append({"pc": f.GetPC(), "sp": f.GetSP(), "cfa": f.GetCFA(), "function": f.GetFunctionName(),
                    "inlined": f.IsInlined(), "artificial": f.IsArtificial()})
    return out


def json_output(line):
    out = command(line)
    return json.loads(out["output"]) if out["ok"] else {"error": out["error"]}


def evaluate(expression):
    """A "py" action: the expression sees lldb, debugger, target and the current process, thread, frame."""
    global process, thread, frame
    process = target.GetProcess()
    thread = process.GetSelectedThread()
    frame = thread.GetSelectedFrame()
    return eval(expression, globals())


lldb.SBDebugger.Initialize()
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(False)       # every command returns once the process has stopped again
target = None
try:
    loaded = command("command script import %s/lldb_commands" % plan["checkout"])
    if not loaded["ok"]:
        raise RuntimeError("import failed: " + loaded["error"])
    target = debugger.CreateTarget(plan["binary"])
    if not target.IsValid():
        raise RuntimeError("cannot create a target for %s" % plan["binary"])
    for line in plan.get("setup", []):
        command(line)
    if plan.get("core"):
        error = lldb.SBError()
        if not target.LoadCore(plan["core"], error).IsValid():
            raise RuntimeError("cannot load the core %s: %s" % (plan["core"], error.GetCString()))
    elif plan.get("launch", True):
        if plan.get("breakpoint"):
            command("breakpoint set --name %s" % plan["breakpoint"])
        launched = command("process launch -- %s" % " ".join(plan.get("args", [])))
        if not launched["ok"] or target.GetProcess().GetState() != lldb.eStateStopped:
            raise RuntimeError("the program did not stop: " + launched["output"] + launched["error"])
    run_actions(plan["actions"], {
        "cmd": command,
        "json": json_output,
        "frames": lambda payload: frames(**(payload or {})),
        "py": evaluate,
    }, results)
except Exception as exc:
    results["__error__"] = session_error(exc)

results["__transcript__"] = "\n".join(transcript)
write_results(plan["out"], results)
if target is not None and target.GetProcess().IsValid():
    target.GetProcess().Kill()
lldb.SBDebugger.Destroy(debugger)
