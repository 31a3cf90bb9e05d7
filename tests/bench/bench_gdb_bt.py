"""Benchmark (not a test): GDB's `bt` of a 10,000-deep recursion, plugin unwinder on vs off.

    python3 tests/bench/bench_gdb_bt.py [--depth N] [--rounds R]

Builds tests/fixtures/chain.c at -O0, stops at the bottom of the recursion,
and times `bt` with the plugin's unwinder claiming every frame and with it
disabled (GDB's own DWARF unwinder), alternating, in the same GDB session.
Prints the median ratio and the target memory reads the plugin made per frame.
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

from support import ROOT, build  # noqa: E402

INSIDE_GDB = r'''
import gc, gdb, json, statistics, time
gdb.execute("source %(root)s/gdb_unwinder/gdbinit.py")
gdb.execute("set unwind claim all")     # the default (auto) leaves these .eh_frame frames to GDB
gdb.execute("file %(binary)s")
gdb.execute("break stop_here")
gdb.execute("run recurse %(depth)d", to_string=True)
state = gdb._unwind_plugin_state
def timed_bt():
    gdb.invalidate_cached_frames()
    gc.collect()
    start = time.perf_counter()
    gdb.execute("bt", to_string=True)
    return time.perf_counter() - start
on, off, reads, claimed, fast = [], [], 0, 0, 0
for _ in range(%(rounds)d):
    state.unwinder.enabled = True
    r0, c0, f0 = state.target.reads, state.unwinder.claimed, state.inferior().plans.fast_hits
    on.append(timed_bt())
    reads += state.target.reads - r0
    claimed += state.unwinder.claimed - c0
    fast += state.inferior().plans.fast_hits - f0
    state.unwinder.enabled = False
    off.append(timed_bt())
json.dump({"on": on, "off": off, "reads": reads, "claimed": claimed, "fast": fast}, open("%(out)s", "w"))
gdb.execute("kill")
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    binary = build("chain.c", ["-O0"])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        script = os.path.join(tmp, "bench.py")
        with open(script, "w") as handle:
            handle.write(INSIDE_GDB % {"root": ROOT, "binary": binary, "depth": args.depth,
                                       "rounds": args.rounds, "out": out})
        subprocess.run(["gdb", "-nx", "-q", "-batch", "-x", script], check=True,
                       capture_output=True, text=True)
        with open(out) as handle:
            data = json.load(handle)
    on, off = sorted(data["on"]), sorted(data["off"])
    median_on, median_off = on[len(on) // 2], off[len(off) // 2]
    frames = data["claimed"] / args.rounds
    print("bt of %d frames, %d rounds" % (args.depth, args.rounds))
    print("plugin unwinder on : median %.3f s (%.1f us/frame)" % (median_on, 1e6 * median_on / frames))
    print("GDB's own unwinder : median %.3f s (%.1f us/frame)" % (median_off, 1e6 * median_off / frames))
    print("ratio on/off       : %.2fx" % (median_on / median_off))
    print("frames claimed     : %d per bt" % frames)
    print("memory reads       : %.2f per frame" % (data["reads"] / max(data["claimed"], 1)))
    print("fast claims        : %.1f%% of claimed frames (a FastRow replayed on the handed registers)"
          % (100.0 * data["fast"] / max(data["claimed"], 1)))


if __name__ == "__main__":
    main()
