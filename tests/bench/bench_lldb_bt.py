"""Benchmark (not a test): `unwind backtrace` of a 10,000-deep recursion vs LLDB's own frames.

    python3 tests/bench/bench_lldb_bt.py [--depth N] [--rounds R] [--versions 16,19,22]

Builds tests/fixtures/chain.c at -O0 and, for each LLDB version, in one
LLDB session per round: launches `chain recurse N` to stop_here, walks
LLDB's own frames through the SB API (SBThread.GetFrameAtIndex, then each
frame's pc, sp and function name: LLDB unwinds them on first use, so
every round is a fresh stop), then runs `unwind backtrace` and `unwind
backtrace --json` (the plugin's whole walk, rendered; the time to parse
the JSON it prints is the reader's and is not counted). Times are CPU time
of the process (time.process_time: LLDB and the plugin run in it), so a
busy machine slows both sides alike. Prints the median ratio plugin/LLDB
per version, and the plugin's target memory reads per frame.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "helpers"))

import lldbrun  # noqa: E402
from support import ROOT, build  # noqa: E402

INSIDE = r'''
import json, time, lldb
lldb.SBDebugger.Initialize()
debugger = lldb.SBDebugger.Create()
debugger.SetAsync(False)
interp = debugger.GetCommandInterpreter()
def command(line):
    result = lldb.SBCommandReturnObject()
    interp.HandleCommand(line, result)
    assert result.Succeeded(), (line, result.GetError())
    return result.GetOutput()
command("command script import %(root)s/lldb_commands")
from lldb_commands.state import state_for
state = state_for(debugger)
rows = []
for _ in range(%(rounds)d):
    target = debugger.CreateTarget("%(binary)s")
    target.BreakpointCreateByName("stop_here")
    process = target.LaunchSimple(["recurse", "%(depth)d"], None, "/tmp")
    thread = process.GetSelectedThread()
    start = time.process_time()
    frames = 0
    while True:
        frame = thread.GetFrameAtIndex(frames)
        if not frame.IsValid():
            break
        frame.GetPC(), frame.GetSP(), frame.GetFunctionName()
        frames += 1
    lldb_time = time.process_time() - start
    start = time.process_time()
    text = command("unwind backtrace")
    text_time = time.process_time() - start
    reads = state.live(target)[0].reads
    start = time.process_time()
    output = command("unwind backtrace --json")
    json_time = time.process_time() - start
    data = json.loads(output)       # the reader's cost, not the command's
    rows.append({"lldb": lldb_time, "text": text_time, "json": json_time, "lldb_frames": frames,
                 "frames": len(data["frames"]), "text_lines": text.count("\n"), "reads": reads})
    process.Kill()
    debugger.DeleteTarget(target)
json.dump(rows, open("%(out)s", "w"))
'''


def _median(values):
    values = sorted(values)
    return values[len(values) // 2]


def bench(version, binary, depth, rounds):
    lldbrun.use(version)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        script = os.path.join(tmp, "bench.py")
        with open(script, "w") as handle:
            handle.write(INSIDE % {"root": ROOT, "binary": binary, "depth": depth, "rounds": rounds, "out": out})
        proc = subprocess.run([lldbrun.SYSTEM_PYTHON, script], env=lldbrun.lldb_env(), capture_output=True,
                              text=True, timeout=3600, cwd=tmp)
        if not os.path.exists(out):
            raise SystemExit("LLDB %d: the benchmark wrote nothing:\n%s" % (version, proc.stdout + proc.stderr))
        with open(out) as handle:
            return json.load(handle)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--versions", default=",".join(str(v) for v in lldbrun.present_versions()))
    args = parser.parse_args()
    binary = build("chain.c", ["-O0"])
    print("unwind backtrace of a %d-deep recursion vs LLDB's own frames (SB API), CPU time, median of %d"
          % (args.depth, args.rounds))
    print("%-6s %8s %8s %8s %10s %10s %8s %12s" % ("lldb", "frames", "lldb s", "text s", "text/lldb",
                                                   "json/lldb", "json s", "reads/frame"))
    for version in (int(v) for v in args.versions.split(",") if v.strip()):
        rows = bench(version, binary, args.depth, args.rounds)
        lldb_s, text_s, json_s = (_median([r[k] for r in rows]) for k in ("lldb", "text", "json"))
        frames = rows[0]["frames"]
        assert frames >= args.depth and rows[0]["lldb_frames"] >= args.depth, rows[0]
        print("%-6d %8d %8.3f %8.3f %9.2fx %9.2fx %8.3f %12.2f" % (
            version, frames, lldb_s, text_s, text_s / lldb_s, json_s / lldb_s, json_s,
            _median([r["reads"] for r in rows]) / frames))


if __name__ == "__main__":
    main()
