"""Benchmark (not a test): GDB's `bt` through code without tables, every frame claimed by analysis.

    python3 tests/bench/bench_analysis.py [--depth N] [--rounds R] [--flags "-O2 -fomit-frame-pointer"]
                                          [--profile MODE] [--raw]

One GDB session, two inferiors stopped at the bottom of an N-deep recursion
of tests/fixtures/chain.c: the twin that keeps its tables, and the same
build with .eh_frame and .eh_frame_hdr removed (code and addresses
unchanged). Times, in CPU seconds, a full `bt` (output discarded), round by
round, each its own command:
  twin      GDB alone on the twin (its DWARF unwinder reads the tables)
  noeh      GDB with the plugin as loaded (default settings) on the build without tables:
            every frame of the recursion is claimed by the `analysis` source (a per-pc plan
            after the first)
  noeh-cold the same after a simulated stop (GDB's frames and the plugin's stop-scoped caches
            dropped; the plans stay: a pc's analysis is a one-time cost)
  twin-raw, noeh-raw  the walk alone (gdb.Frame.older() to the end, nothing printed): `bt` of
            -O2 code with debug info spends most of its time printing arguments
--raw times the raw walks only (a `bt` of 10,000 frames of this -O2 code takes GDB
about 17 s, nearly all of it printing). --profile MODE prints a cProfile (inside GDB) of one more walk in that mode.
Prints the medians, the ratio to the twin, and whether GDB's frames (pc and sp) on the
build without tables equal its frames on the twin, through main.
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

NO_TABLES = [["objcopy", "--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr", "{out}"]]

SETUP = r'''
import gc, gdb, json, time
TIMES = {"twin": [], "noeh": [], "noeh-cold": [], "twin-raw": [], "noeh-raw": []}
STATE = gdb._unwind_plugin_state
def select(mode):
    gdb.execute("inferior %d" % (1 if mode == "twin" else 2), to_string=True)
    STATE.unwinder.enabled = mode != "twin"
    gdb.invalidate_cached_frames()
    if mode == "noeh-cold":
        STATE.stopped()
        gdb.execute("maintenance flush register-cache", to_string=True)
def walk(mode):
    raw = mode.endswith("-raw")
    select(mode[:-4] if raw else mode)
    gc.collect()
    start = time.process_time()
    if raw:         # the frames alone: no names, arguments or source lines printed
        frame = gdb.newest_frame()
        while frame is not None:
            frame = frame.older()
    else:
        gdb.execute("bt", to_string=True)
    TIMES[mode].append(time.process_time() - start)
def profile(mode, path):
    import cProfile, io, pstats
    prof = cProfile.Profile()
    prof.enable()
    walk(mode)
    prof.disable()
    TIMES[mode].pop()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    open(path, "w").write(out.getvalue())
def frames(mode):
    select(mode)
    out, frame = [], gdb.newest_frame()
    while frame is not None:
        out.append([frame.pc(), int(frame.read_register("sp")), frame.name()])
        frame = frame.older()
    return out
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flags", default="-O2 -fomit-frame-pointer")
    parser.add_argument("--profile", choices=("twin", "noeh", "noeh-cold", "twin-raw", "noeh-raw"))
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args()
    flags = args.flags.split()
    twin = build("chain.c", flags, name="bench-analysis-twin")
    noeh = build("chain.c", flags, name="bench-analysis-noeh", post=NO_TABLES)
    with tempfile.TemporaryDirectory() as tmp:
        out, setup = os.path.join(tmp, "bench.json"), os.path.join(tmp, "setup.py")
        Path(setup).write_text(SETUP)
        commands = ["set pagination off", "set confirm off", "set backtrace past-main off",
                    "source %s/gdb_unwinder/gdbinit.py" % ROOT, "source %s" % setup,
                    "file %s" % twin, "break stop_here", "run recurse %d" % args.depth,
                    "add-inferior -exec %s" % noeh, "inferior 2", "run recurse %d" % args.depth,
                    "python FIRST = time.process_time(); walk(%r); FIRST = time.process_time() - FIRST; TIMES[%r].pop()"
                    % ((("noeh-raw" if args.raw else "noeh"),) * 2)]
        for r in range(args.rounds):
            order = ("twin", "noeh", "noeh-cold", "twin-raw", "noeh-raw") if r % 2 == 0 \
                else ("noeh-raw", "twin-raw", "noeh-cold", "noeh", "twin")
            commands += ["python walk(%r)" % mode for mode in order if mode.endswith("-raw") or not args.raw]
        if args.profile:
            commands.append("python profile(%r, %r)" % (args.profile, os.path.join(tmp, "profile.txt")))
        commands += ["python json.dump({'times': TIMES, 'first': FIRST, 'twin': frames('twin'), "
                     "'noeh': frames('noeh'), 'plans': STATE.inferior().plans.hits}, open(%r, 'w'))" % out,
                     "kill inferiors 1 2"]
        command = ["gdb", "-nx", "-q", "-batch"]
        for line in commands:
            command += ["-ex", line]
        proc = subprocess.run(command, capture_output=True, text=True)
        if not os.path.exists(out):
            sys.exit("GDB failed:\n" + (proc.stdout + proc.stderr)[-3000:])
        data = json.loads(Path(out).read_text())
        if args.profile:
            print(Path(tmp, "profile.txt").read_text())
    medians = {m: sorted(t)[len(t) // 2] for m, t in data["times"].items() if t}
    twin_frames, noeh_frames = data["twin"], data["noeh"]
    names = [f[2] for f in twin_frames]
    through_main = names.index("main") + 1 if "main" in names else len(names)
    right = [f[:2] for f in noeh_frames[:through_main]] == [f[:2] for f in twin_frames[:through_main]]
    print("bt of %d frames (chain.c %s, recurse %d), %d rounds, CPU time, median; plugin from %s"
          % (len(twin_frames), args.flags, args.depth, args.rounds, ROOT))
    print("  GDB's frames without tables equal the twin's through main (pc, sp): %s (%d and %d frames)"
          % (right, len(noeh_frames), len(twin_frames)))
    for mode in ("twin-raw", "noeh-raw") if args.raw else ("twin", "noeh", "noeh-cold", "twin-raw", "noeh-raw"):
        base = medians["twin-raw" if mode.endswith("-raw") else "twin"]
        print("  %-9s %7.3f s  %6.1f us/frame  %.2fx %s" % (mode, medians[mode], 1e6 * medians[mode] / len(twin_frames),
                                                             medians[mode] / base, "twin-raw" if mode.endswith("-raw") else "twin"))
    first = "twin-raw" if args.raw else "twin"
    print("  first %s without tables (every pc analysed once): %.3f s, %.2fx %s"
          % ("raw walk" if args.raw else "bt", data["first"], data["first"] / medians[first], first))


if __name__ == "__main__":
    main()
