"""Benchmark (not a test): `python -m plugin validate FILE --jobs N`, CPU seconds, wall seconds, peak memory.

    python3 tests/bench/bench_validate.py [--rounds R] [--jobs 1,2] [FILE ...]

Runs each file (default: /usr/bin/python3.11 and libc.so.6) with each --jobs
value, round after round (the values alternate within a round, so a change
of the machine's load falls on all of them alike), output discarded. Per
run: CPU = user + system seconds of the command and its worker processes
(getrusage of the children), wall seconds, and the peak resident memory of
the largest process (ru_maxrss of the children: the largest single process,
not a sum). Prints every run and the medians, with the load average before
each round (the machine may be shared).
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILES = ["/usr/bin/python3.11", "/lib/x86_64-linux-gnu/libc.so.6"]


def run_once(path: str, jobs: int) -> dict:
    """One run in a fresh child (its getrusage counts only itself and its workers)."""
    code = ("import resource, subprocess, sys, time\n"
            "t = time.perf_counter()\n"
            "rc = subprocess.call([sys.executable, '-m', 'plugin', 'validate', sys.argv[1], '--jobs', sys.argv[2]],"
            " stdout=subprocess.DEVNULL)\n"
            "wall = time.perf_counter() - t\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(rc, u.ru_utime + u.ru_stime, wall, u.ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", code, path, str(jobs)], cwd=str(ROOT), capture_output=True,
                         text=True, check=True).stdout.split()
    return {"status": int(out[0]), "cpu": float(out[1]), "wall": float(out[2]), "peak_mib": int(out[3]) / 1024}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", default="1,2")
    args = parser.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    runs = {(f, j): [] for f in args.files for j in jobs}
    for round_ in range(args.rounds):
        print("round %d, load average %.2f" % (round_ + 1, os.getloadavg()[0]), flush=True)
        for path in args.files:
            for j in jobs:
                found = run_once(path, j)
                runs[(path, j)].append(found)
                print("  %s --jobs %d: status %d, %.1f s CPU, %.1f s wall, %.0f MiB peak"
                      % (Path(path).name, j, found["status"], found["cpu"], found["wall"], found["peak_mib"]),
                      flush=True)
    print("medians of %d rounds:" % args.rounds)
    for (path, j), found in runs.items():
        print("  %s --jobs %d: %.1f s CPU, %.1f s wall, %.0f MiB peak"
              % (Path(path).name, j, statistics.median(r["cpu"] for r in found),
                 statistics.median(r["wall"] for r in found), statistics.median(r["peak_mib"] for r in found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
