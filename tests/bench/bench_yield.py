"""Benchmark (not a test): what the claim path's check against GDB's own heuristic costs.

    python3 tests/bench/bench_yield.py [--depth N] [--rounds R]

Builds tests/fixtures/chain.c at -O0, removes its tables (objcopy), stops at
the bottom of an N-deep recursion and times GDB's `bt` with `set unwind
fallback on` and only guessing sources (`cfi,frame-pointer,scan`), so every
frame of the recursion is a frame-pointer guess the check looks at
(plugin/debugger_heuristic.py), against the same `bt` with the check replaced by one
that never declines; interleaved round by round in one session. Prints the
medians and their ratio.
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

from support import NO_TABLES, ROOT, build  # noqa: E402

INSIDE_GDB = r'''
import gdb, json, time
gdb.execute("source %(root)s/gdb_unwinder/gdbinit.py")
gdb.execute("set pagination off")
gdb.execute("file %(binary)s")
gdb.execute("break stop_here")
gdb.execute("run recurse %(depth)d", to_string=True)
gdb.execute("set unwind fallback on")
gdb.execute("set unwind sources cfi,frame-pointer,scan")
import gdb_unwinder.unwinder as unwinder
check = unwinder.yields_to_debugger
def timed_bt():
    gdb.invalidate_cached_frames()
    start = time.perf_counter()
    gdb.execute("bt", to_string=True)
    return time.perf_counter() - start
checked, unchecked = [], []
for _ in range(%(rounds)d):
    unwinder.yields_to_debugger = check
    checked.append(timed_bt())
    unwinder.yields_to_debugger = lambda *args: None
    unchecked.append(timed_bt())
json.dump({"checked": checked, "unchecked": unchecked}, open("%(out)s", "w"))
gdb.execute("kill")
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    binary = build("chain.c", ["-O0"], name="chain-noeh-bench",
                   post=[["objcopy", *NO_TABLES, "{out}"]])
    with tempfile.TemporaryDirectory() as tmp:
        out, script = os.path.join(tmp, "bench.json"), os.path.join(tmp, "bench.py")
        with open(script, "w") as handle:
            handle.write(INSIDE_GDB % {"root": ROOT, "binary": binary, "depth": args.depth,
                                       "rounds": args.rounds, "out": out})
        subprocess.run(["gdb", "-nx", "-q", "-batch", "-x", script], check=True, capture_output=True, text=True)
        with open(out) as handle:
            data = json.load(handle)
    checked, unchecked = sorted(data["checked"]), sorted(data["unchecked"])
    median_checked, median_unchecked = checked[len(checked) // 2], unchecked[len(unchecked) // 2]
    print("bt of a %d-deep recursion, frame-pointer guesses, %d rounds" % (args.depth, args.rounds))
    print("with the check    : median %.3f s" % median_checked)
    print("without the check : median %.3f s" % median_unchecked)
    print("ratio             : %.2fx" % (median_checked / median_unchecked))


if __name__ == "__main__":
    main()
