"""Benchmark (not a test): GDB's `bt` of a Linux kernel under QEMU's gdbstub, the plugin on vs off.

    python3 tests/bench/bench_orc_bt.py [--release 6.1.0-50-amd64] [--rounds R] [--in-tracer] [--profile]

Boots Debian's kernel as tests/realworld/test_orc_qemu.py does (TCG, nokaslr, symbols from
kallsyms), stops at the first timer tick that interrupted the kernel after the initramfs's
marker's traced call has returned (`finish`; the deepest stop of that test: the tick's handler on
the IRQ stack, the interrupted syscall below it; --in-tracer: without `finish`, so the tick often
lands in ftrace's tracer and the stack passes through its dynamic trampoline), and times `bt` there with the plugin loaded (its unwinders and its frame
filter), with all three disabled (GDB alone), with its unwinders but not its frame filter (GDB's
own printing, which ends with an error), and GDB alone printed through a Python frame filter that
changes nothing, alternating, GDB's frame cache dropped before each. Also the floor of any Python
unwinder: one that answers each level from a table made beforehand (the plugin's frame ids and
registers) with a frame filter that ends at the plugin's last frame; and the first bt at a stop
(GDB's register cache and dcache dropped before it, and for the plugin its caches of the stop),
the plugin's and GDB alone's. Prints the frames each gives and the median wall time of R rounds,
and the first (cold) round of each: the plugin's tables are read over the gdbstub then, and kept
afterwards. --profile: cProfile of 20 warm bts inside GDB; --profile-first: of 20 first bts.
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
import difflib, gdb, json, statistics, time
from gdb.FrameDecorator import FrameDecorator
from gdb.unwinder import Unwinder, register_unwinder
from gdb_unwinder.compat import FrameId
state = gdb._unwind_plugin_state
PLUGIN_HANDS = ("rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
                "r13", "r14", "r15", "rip")
class PassThrough:
    """GDB alone printing through a Python frame filter that changes nothing (the "filter" row)."""
    name, priority, enabled = "bench-pass-through", 0, False
    def filter(self, frame_iter):
        return (FrameDecorator(frame.inferior_frame()) for frame in frame_iter)
passing = gdb.frame_filters[PassThrough.name] = PassThrough()
def plugin_frames():
    """The plugin's frames of this stop."""
    frames, frame = [], gdb.newest_frame()
    while frame is not None:
        frames.append(frame)
        try:
            frame = frame.older()
        except gdb.error:
            try:
                frame = frame.older()       # GDB noted the caller absent: the walk's end
            except gdb.error:
                break
    return frames
class Fixed(Unwinder):
    """The floor: a Python unwinder whose answer for each level is made beforehand (the frame id and
    the registers the plugin hands GDB for that frame's caller, as gdb.Values)."""
    def __init__(self, frames):
        super().__init__("bench-fixed")
        self.enabled = False
        names = [d for d in frames[0].architecture().registers() if d.name in PLUGIN_HANDS]
        self.answers = {}
        for level, frame in enumerate(frames):
            if level + 1 < len(frames):
                caller, given = frames[level + 1], []
                for d in names:
                    try:
                        value = caller.read_register(d)
                        if not value.is_optimized_out:
                            given.append((d, gdb.Value(int(value)).cast(value.type)))
                    except (gdb.error, ValueError):
                        pass
                cfa = int(caller.read_register("rsp"))
            else:       # the outermost: rsp only, its pc not saved (as the plugin's kernel frames end a stack)
                given, cfa = [(d, frame.read_register(d)) for d in names if d.name == "rsp"], 0
            self.answers[level] = (FrameId(cfa, frame.pc()), given)
    def __call__(self, pending_frame):
        frame_id, given = self.answers[pending_frame.level()]
        info = pending_frame.create_unwind_info(frame_id)
        for d, value in given:
            info.add_saved_register(d, value)
        return info
class FixedEnd:
    """The floor's frame filter: GDB's frames walked from the newest, ending at the plugin's last frame's pc."""
    name, priority, enabled = "bench-fixed-end", 1 << 30, False
    last_pc = None
    def filter(self, frame_iter):
        def walk(frame):
            while frame is not None:
                yield FrameDecorator(frame)
                if frame.pc() == self.last_pc:
                    return
                frame = frame.older()
        return walk(gdb.newest_frame())
def plugin(on):
    state.unwinder.enabled = on in (True, "unwinders")     # and the kernel frames it asks
    state.kernel_end.enabled = on is True       # "unwinders": the plugin's unwinders without its frame filter
    passing.enabled = on == "filter"
    if fixed is not None:
        fixed.enabled = fixed_end.enabled = on == "floor"
def timed(first=False, ours=False):
    gdb.invalidate_cached_frames()
    if first:       # as at a new stop: GDB's register and memory caches dropped, and the plugin's of the stop
        gdb.execute("maintenance flush register-cache")
        gdb.execute("maintenance flush dcache")
        if ours:
            state.resumed()     # the process ran (which drops what stopped() drops, and more)
    start = time.perf_counter()
    try:
        out = gdb.execute("bt", to_string=True)
    except gdb.error as exc:        # GDB alone, or without the frame filter, may end its bt with an error
        return time.perf_counter() - start, str(exc)
    return time.perf_counter() - start, sum(1 for line in out.splitlines() if line.startswith("#"))
fixed = fixed_end = None
plugin(True)
frames = plugin_frames()
fixed = Fixed(frames)
register_unwinder(None, fixed, replace=True)
fixed_end = gdb.frame_filters[FixedEnd.name] = FixedEnd()
fixed_end.last_pc = frames[-1].pc()
MODES = (True, False, "unwinders", "filter", "floor", "first", "first-gdb")
times = {mode: [] for mode in MODES}
counts = {}
for _ in range(%(rounds)d):
    for mode in MODES:
        plugin(True if mode == "first" else False if mode == "first-gdb" else mode)
        seconds, count = timed(first=mode in ("first", "first-gdb"), ours=mode == "first")
        times[mode].append(seconds)
        counts[mode] = count
texts = {}
for mode in (True, "floor"):
    plugin(mode)
    gdb.invalidate_cached_frames()
    texts[mode] = gdb.execute("bt", to_string=True)
plugin(True)
if %(profile)d:
    import cProfile, io, pstats
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        timed(first=%(profile)d == 2, ours=%(profile)d == 2)
    profile.disable()
    report = io.StringIO()
    pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(25)
    pstats.Stats(profile, stream=report).sort_stats("cumulative").print_stats(40)
    print("PROFILE-START\n" + report.getvalue() + "PROFILE-END")
def row(mode):
    return {"frames": counts[mode], "cold": times[mode][0], "median": statistics.median(times[mode][1:] or times[mode])}
print("BENCH " + json.dumps({"plugin": row(True), "gdb": row(False), "unwinders": row("unwinders"),
                             "filter": row("filter"), "floor": row("floor"), "first": row("first"),
                             "first_gdb": row("first-gdb"),
                             "floor_same": texts[True] == texts["floor"] or list(difflib.unified_diff(
                                 texts[True].splitlines(), texts["floor"].splitlines(), lineterm="", n=0))}))
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="6.1.0-50-amd64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of 20 warm bts")
    parser.add_argument("--in-tracer", action="store_true",
                        help="stop at the first tick after the marker without `finish`: often in ftrace's tracer, "
                             "its stack through a dynamic ftrace trampoline")
    parser.add_argument("--profile-first", action="store_true",
                        help="the same of 20 first bts at a stop (the caches of the stop dropped before each)")
    args = parser.parse_args()
    root = qemu.KERNELS / args.release
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / ("bench-orc-" + args.release)
    tmp.mkdir(exist_ok=True)
    initrd = qemu._initrd(tmp)
    symbols, symbol_file, _ = qemu._first_boot(root, initrd, tmp)
    script = tmp / "inside_gdb.py"
    script.write_text(INSIDE_GDB % {"rounds": args.rounds, "profile": 2 if args.profile_first else int(args.profile)})
    # `finish` as the test does: the marker's traced call is over, so the tick does not land in ftrace's
    # tracer (whose stack passes through a dynamic ftrace trampoline); --in-tracer: without it
    finish = [] if args.in_tracer else ["finish"]
    gdb = qemu._gdb_on_qemu(root, initrd, tmp / "serial.txt", symbol_file,
                            ["hbreak *0x%x" % symbols[qemu.MARKER], "continue", "delete"] + finish +
                            ["hbreak *0x%x if $rdi == 0" % symbols["update_process_times"], "continue",
                             "source %s" % script])
    found = [line for line in gdb.stdout.splitlines() if line.startswith("BENCH ")]
    if not found:
        sys.exit("no figures:\n" + gdb.stdout[-2000:] + gdb.stderr[-2000:])
    if args.profile or args.profile_first:
        print(gdb.stdout.split("PROFILE-START\n", 1)[-1].split("PROFILE-END", 1)[0])
    result = json.loads(found[0][6:])
    plugin, alone = result["plugin"], result["gdb"]
    print("kernel %s, timer-tick stop, %d rounds" % (args.release, args.rounds))
    for label, row in (("GDB + plugin ", plugin), ("GDB alone    ", alone), ("no filter    ", result["unwinders"]),
                       ("pass filter  ", result["filter"]), ("floor        ", result["floor"]),
                       ("first, plugin", result["first"]), ("first, alone ", result["first_gdb"])):
        per_frame = row["median"] / row["frames"] * 1000 if isinstance(row["frames"], int) and row["frames"] else 0
        print("  %s: %s frames, median %.2f ms (%.3f ms a frame), cold %.2f ms"
              % (label, row["frames"], row["median"] * 1000, per_frame, row["cold"] * 1000))
    print("  ratio of the medians: %.1f; first bt at a stop: %.1f; floor / GDB alone: %.1f"
          % (plugin["median"] / alone["median"], result["first"]["median"] / result["first_gdb"]["median"],
             result["floor"]["median"] / alone["median"]))
    print("  the floor's bt %s the plugin's" % ("equals" if result["floor_same"] is True else "DIFFERS FROM"))
    if result["floor_same"] is not True:
        print("\n".join("    " + line for line in result["floor_same"]))
    print("  (no filter: the plugin's unwinders without its frame filter, GDB's own printing: bt ends with an error;"
          " pass filter: GDB alone, printed through a Python frame filter that changes nothing;"
          " floor: a Python unwinder answering each level from a table made beforehand, and a frame filter"
          " that ends at the plugin's last frame; first: GDB's register and memory caches dropped before each bt,"
          " and for the plugin its caches of the stop, as at a new stop at the same place)")


if __name__ == "__main__":
    main()
