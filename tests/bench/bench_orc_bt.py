"""Benchmark (not a test): GDB's `bt` of a Linux kernel under QEMU's gdbstub, the plugin on vs off.

    python3 tests/bench/bench_orc_bt.py [--release 6.1.0-50-amd64] [--rounds R] [--profile]

Boots Debian's kernel as tests/realworld/test_orc_qemu.py does (TCG, nokaslr, symbols from
kallsyms), stops at the first timer tick that interrupted the kernel after the initramfs's
marker (the deepest stop of that test: the tick's handler on the IRQ stack, the interrupted
syscall below it), and times `bt` there with the plugin loaded (its unwinders and its frame
filter), with all three disabled (GDB alone), with its unwinders but not its frame filter (GDB's
own printing, which ends with an error), and GDB alone printed through a Python frame filter that
changes nothing, alternating, GDB's frame cache dropped before each. Prints the frames each gives
and the median wall time of R rounds, and the first (cold) round of each: the plugin's tables are
read over the gdbstub then, and kept afterwards. --profile: cProfile of 20 warm bts inside GDB.
"""

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "helpers"), str(HERE.parent / "realworld")]

import test_orc_qemu as qemu  # noqa: E402

INSIDE_GDB = r'''
import gdb, json, statistics, time
from gdb.FrameDecorator import FrameDecorator
state = gdb._unwind_plugin_state
class PassThrough:
    """GDB alone printing through a Python frame filter that changes nothing (the "filter" row)."""
    name, priority, enabled = "bench-pass-through", 0, False
    def filter(self, frame_iter):
        return (FrameDecorator(frame.inferior_frame()) for frame in frame_iter)
passing = gdb.frame_filters[PassThrough.name] = PassThrough()
def plugin(on):
    state.unwinder.enabled = on in (True, "unwinders")     # and the kernel frames it asks
    state.kernel_end.enabled = on is True       # "unwinders": the plugin's unwinders without its frame filter
    passing.enabled = on == "filter"
def timed():
    gdb.invalidate_cached_frames()
    start = time.perf_counter()
    try:
        out = gdb.execute("bt", to_string=True)
    except gdb.error as exc:        # GDB alone, or without the frame filter, may end its bt with an error
        return time.perf_counter() - start, str(exc)
    return time.perf_counter() - start, sum(1 for line in out.splitlines() if line.startswith("#"))
times = {True: [], False: [], "unwinders": [], "filter": []}
frames = {}
for _ in range(%(rounds)d):
    for on in (True, False, "unwinders", "filter"):
        plugin(on)
        seconds, count = timed()
        times[on].append(seconds)
        frames[on] = count
plugin(True)
if %(profile)d:
    import cProfile, io, pstats
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        timed()
    profile.disable()
    report = io.StringIO()
    pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(25)
    pstats.Stats(profile, stream=report).sort_stats("cumulative").print_stats(40)
    print("PROFILE-START\n" + report.getvalue() + "PROFILE-END")
print("BENCH " + json.dumps({"plugin": {"frames": frames[True], "cold": times[True][0],
                                        "median": statistics.median(times[True][1:] or times[True])},
                             "gdb": {"frames": frames[False], "cold": times[False][0],
                                     "median": statistics.median(times[False][1:] or times[False])},
                             "unwinders": {"frames": frames["unwinders"], "cold": times["unwinders"][0],
                                           "median": statistics.median(times["unwinders"][1:] or times["unwinders"])},
                             "filter": {"frames": frames["filter"], "cold": times["filter"][0],
                                        "median": statistics.median(times["filter"][1:] or times["filter"])}}))
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="6.1.0-50-amd64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of 20 warm bts")
    args = parser.parse_args()
    root = qemu.KERNELS / args.release
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / ("bench-orc-" + args.release)
    tmp.mkdir(exist_ok=True)
    initrd = qemu._initrd(tmp)
    symbols, symbol_file, _ = qemu._first_boot(root, initrd, tmp)
    script = tmp / "inside_gdb.py"
    script.write_text(INSIDE_GDB % {"rounds": args.rounds, "profile": args.profile})
    gdb = qemu._gdb_on_qemu(root, initrd, tmp / "serial.txt", symbol_file,
                            ["hbreak *0x%x" % symbols[qemu.MARKER], "continue", "delete",
                             "hbreak *0x%x if $rdi == 0" % symbols["update_process_times"], "continue",
                             "source %s" % script])
    found = [line for line in gdb.stdout.splitlines() if line.startswith("BENCH ")]
    if not found:
        sys.exit("no figures:\n" + gdb.stdout[-2000:] + gdb.stderr[-2000:])
    if args.profile:
        print(gdb.stdout.split("PROFILE-START\n", 1)[-1].split("PROFILE-END", 1)[0])
    result = json.loads(found[0][6:])
    plugin, alone = result["plugin"], result["gdb"]
    print("kernel %s, timer-tick stop, %d rounds" % (args.release, args.rounds))
    for label, row in (("GDB + plugin", plugin), ("GDB alone   ", alone), ("no filter   ", result["unwinders"]),
                       ("pass filter ", result["filter"])):
        per_frame = row["median"] / row["frames"] * 1000 if isinstance(row["frames"], int) and row["frames"] else 0
        print("  %s: %s frames, median %.2f ms (%.2f ms a frame), cold %.2f ms"
              % (label, row["frames"], row["median"] * 1000, per_frame, row["cold"] * 1000))
    print("  ratio of the medians: %.1f (GDB alone stops after its first frames)" % (plugin["median"] / alone["median"]))
    print("  (no filter: the plugin's unwinders without its frame filter, GDB's own printing: bt ends with an error;"
          " pass filter: GDB alone, printed through a Python frame filter that changes nothing)")


if __name__ == "__main__":
    main()
