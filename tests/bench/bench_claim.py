"""Benchmark (not a test): GDB's `bt` under each `set unwind claim` policy against GDB alone.

    python3 tests/bench/bench_claim.py [--depth N] [--rounds R] [--flags -O0] [--python]
                                       [--root CHECKOUT] [--profile MODE] [--sources LIST]

Stops tests/fixtures/chain.c at the bottom of an N-deep recursion (or, with
--python, Debian's python3 in getpid() under N levels of map() recursion: a
varied stack of interpreter and libc frames) and times,
in CPU seconds, a full `bt` (output discarded) per GDB command: each timed
walk is its own top-level command (in GDB 13, walks through a Python
unwinder slow down when GDB's own unwinder walked earlier in the same
command). Modes, interleaved round by round in one session, each round
starting with the next mode:
  native  the plugin's unwinders disabled (GDB's own unwinders only)
  auto    the default: declines what GDB's DWARF unwinder covers
  all     claims every frame it can
  none    called by GDB for every frame, claims nothing
  floor   the floor of a Python unwinder that decides by pc: the plugin's disabled, a
          minimal one reads the pc by register descriptor and declines every frame
Prints the median per mode, per frame, and the ratio to native; then, after a
simulated stop (GDB's frame cache and the plugin's stop-scoped caches
dropped), GDB's first full `bt` against the first `unwind explain`.
--root loads the plugin from another checkout (a before/after pair in one
session of the machine); --profile MODE prints a cProfile of one warm walk;
--sources LIST runs `set unwind sources LIST` first (e.g. `cfi,sframe`: no
source that reads code, so `claim auto` may leave every frame to GDB unseen).
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

MODES = ("native", "auto", "all", "none", "floor")

SETUP = r'''
import gc, gdb, json, time
from gdb.unwinder import Unwinder, register_unwinder
TIMES = {mode: [] for mode in %(modes)r + ("first-bt", "first-explain")}
STATE = gdb._unwind_plugin_state
class Floor(Unwinder):
    """Reads the pc the cheapest way (by register descriptor), declines: what a Python unwinder
    that decides by pc pays per frame at least (GDB 13 hands it no pc)."""
    def __init__(self):
        super().__init__("bench-floor")
        self.enabled = False
        self.pcs = {}       # gdb.Architecture -> the descriptor of its pc register
    def __call__(self, pending_frame):
        arch = pending_frame.architecture()
        pc = self.pcs.get(arch)
        if pc is None:
            names = {d.name: d for d in arch.registers()}
            pc = self.pcs[arch] = next(names[n] for n in ("rip", "eip", "pc") if n in names)
        int(pending_frame.read_register(pc))
        return None
FLOOR = Floor()
register_unwinder(None, FLOOR)
def use(mode):
    STATE.unwinder.enabled = mode not in ("native", "floor")
    kernel = getattr(STATE, "kernel_frames", None)     # a second unwinder in older checkouts (--root)
    if kernel is not None and hasattr(kernel, "enabled"):
        kernel.enabled = STATE.unwinder.enabled
    FLOOR.enabled = mode == "floor"
    if STATE.unwinder.enabled:
        gdb.execute("set unwind claim %%s" %% mode, to_string=True)
    gdb.invalidate_cached_frames()
def profile(mode):
    import cProfile, io, pstats
    use(mode)
    gdb.execute("bt", to_string=True)
    use(mode)
    profiler = cProfile.Profile()
    profiler.enable()
    gdb.execute("bt", to_string=True)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    PROFILES[mode] = text.getvalue()
PROFILES = {}
def walk(mode):
    gc.collect()        # no walk pays for the garbage of the one before it
    start = time.process_time()
    gdb.execute("bt", to_string=True)
    TIMES[mode].append(time.process_time() - start)
def cold(mode):
    """After a stop (GDB's frames and the plugin's stop-scoped caches dropped): GDB's first `bt`
    alone (native), or the first `unwind explain` of the selected frame with default settings."""
    use("native" if mode == "first-bt" else "auto")
    STATE.resumed()
    gdb.execute("maintenance flush register-cache", to_string=True)
    start = time.process_time()
    gdb.execute("bt" if mode == "first-bt" else "unwind explain", to_string=True)
    TIMES[mode].append(time.process_time() - start)
def depth():
    count, frame = 0, gdb.newest_frame()
    while frame is not None:
        count, frame = count + 1, frame.older()
    return count
'''


PYTHON_RECURSION = ("import os, sys; sys.setrecursionlimit(100000); "
                    "f = lambda n: list(map(f, [n - 1])) if n else os.getpid(); f(%d)")


def gdb_commands(binary, depth, rounds, out, python=False, root=ROOT, profile=None, sources=None):
    commands = ["set pagination off", "set confirm off",
                "source %s/gdb_unwinder/gdbinit.py" % root, "file %s" % binary]
    if sources:
        commands.append("set unwind sources %s" % sources)
    if python:
        commands += ["set breakpoint pending on", "break getpid",
                     "run -c \"%s\"" % (PYTHON_RECURSION % depth)]
    else:
        commands += ["break stop_here", "run recurse %d" % depth]
    for r in range(rounds):
        # Each round starts with another mode: no mode always follows `all` (whose claims leave
        # the most Python objects behind) or always runs first.
        for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
            commands += ["python use(%r)" % mode, "python walk(%r)" % mode]
        commands += ["python cold('first-bt')", "python cold('first-explain')"]
    if profile:
        commands.append("python profile(%r)" % profile)
    commands += ["python use('native')",
                 "python json.dump({'times': TIMES, 'frames': depth(), 'profiles': PROFILES}, open(%r, 'w'))" % out,
                 "kill"]
    return commands


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flags", default="-O0")
    parser.add_argument("--python", action="store_true", help="walk python3's stack instead")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose plugin GDB loads")
    parser.add_argument("--profile", choices=MODES, help="print a cProfile of one warm walk in this mode")
    parser.add_argument("--sources", help="set unwind sources LIST before the walks")
    args = parser.parse_args()
    binary = "/usr/bin/python3" if args.python else build("chain.c", args.flags.split())
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        setup = os.path.join(tmp, "setup.py")
        with open(setup, "w") as handle:
            handle.write(SETUP % {"modes": MODES})
        command = ["gdb", "-nx", "-q", "-batch"]
        commands = gdb_commands(binary, args.depth, args.rounds, out, args.python, args.root, args.profile,
                                args.sources)
        head = 5 if args.sources else 4     # the lines before the setup script
        for line in commands[:head]:
            command += ["-ex", line]
        command += ["-x", setup]
        for line in commands[head:]:
            command += ["-ex", line]
        proc = subprocess.run(command, capture_output=True, text=True)
        if not os.path.exists(out):
            sys.exit("GDB failed:\n" + (proc.stdout + proc.stderr)[:3000])
        with open(out) as handle:
            data = json.load(handle)
    frames = data["frames"]
    medians = {m: sorted(t)[len(t) // 2] for m, t in data["times"].items()}
    what = "python3, map() recursion %d" % args.depth if args.python else \
        "chain.c %s, recurse %d" % (args.flags, args.depth)
    print("bt of %d frames (%s), %d rounds, CPU time, median; plugin from %s%s"
          % (frames, what, args.rounds, args.root, "; sources %s" % args.sources if args.sources else ""))
    for mode in MODES:
        print("  %-7s %7.3f s  %6.1f us/frame  %.2fx native  %.2fx floor"
              % (mode, medians[mode], 1e6 * medians[mode] / frames, medians[mode] / medians["native"],
                 medians[mode] / medians["floor"]))
    print("after a stop: GDB's first bt %.1f ms; first `unwind explain` (default settings) %.1f ms: %.2fx"
          % (1e3 * medians["first-bt"], 1e3 * medians["first-explain"],
             medians["first-explain"] / medians["first-bt"]))
    for mode, text in data["profiles"].items():
        print("\nprofile of one warm walk, %s:\n%s" % (mode, text))


if __name__ == "__main__":
    main()
