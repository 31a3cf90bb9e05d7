"""Mutation fuzzer over the offline command's whole path: file open, layout,
module discovery and every decoder, as `python -m plugin tables` runs them.

    python3 tests/realworld/fuzz_offline.py [--seconds 60] [--seed 1] [--save DIR] SEED_FILE...

Each input is a seed file with a few mutations (bit flips, random bytes,
boundary values written as 1/2/4/8-byte integers, truncation, growth), aimed
half the time at the bytes that matter most: the ELF header, program and
section header tables, and the unwind sections. Each runs in a forked child
(limits: MEMORY_LIMIT of address space beyond what the fork inherited,
TIME_LIMIT seconds) calling
plugin.__main__.main with its output thrown away; the parent records exit
status, time and peak RSS (wait4). An exception escaping main (which would
be a traceback for the user) is a finding; exit statuses 0/1/2 are not.
Prints executions, findings by type, the slowest input and the peak memory;
--save keeps each finding's input. Exit status 1 when there are findings.
"""

import argparse
import io
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TIME_LIMIT = 10             # seconds per input (the bound for inputs under 100 MB)
MEMORY_LIMIT = 1 << 30      # address space per child; peak RSS is reported separately
BOUNDARY = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, 0xFFFFFFFF,
            1 << 30, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
TABLES = (".eh_frame", ".eh_frame_hdr", ".sframe", ".debug_frame", ".zdebug_frame", ".ARM.exidx",
          ".rela.eh_frame", ".symtab")


def hot_ranges(data):
    """[(offset, size)] of the bytes most worth mutating in an ELF file."""
    from elftools.elf.elffile import ELFFile
    ranges = [(0, 64)]
    try:
        elf = ELFFile(io.BytesIO(data))
        ranges.append((elf["e_phoff"], elf["e_phentsize"] * elf["e_phnum"]))
        ranges.append((elf["e_shoff"], elf["e_shentsize"] * elf["e_shnum"]))
        for sec in elf.iter_sections():
            if sec.name in TABLES and sec["sh_type"] != "SHT_NOBITS":
                ranges.append((sec["sh_offset"], sec["sh_size"]))
    except Exception:       # a seed pyelftools cannot read: mutate it uniformly
        pass
    return [(o, s) for o, s in ranges if s > 0 and o + s <= len(data)]


def mutate(rng, data, hot):
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        if hot and rng.random() < 0.5:
            start, size = rng.choice(hot)
            at = (start + rng.randrange(size)) % len(out)     # earlier mutations may have cut the file
        else:
            at = rng.randrange(len(out))
        kind = rng.randrange(6)
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at] = rng.randrange(256)
        elif kind in (2, 3):
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(BOUNDARY) & ((1 << 8 * width) - 1)
            if at + width <= len(out):
                out[at:at + width] = value.to_bytes(width, "little")
        elif kind == 4 and len(out) > 1:
            del out[rng.randrange(1, len(out)):]
        elif kind == 5:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return bytes(out)


def run_child(job, report):
    """In the forked child: limits, then job(); its message or the exception escaping
    it goes to the report pipe."""
    # On top of what the fork inherited (a test runner's address space may be large already).
    with open("/proc/self/statm") as statm:
        inherited = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (inherited + MEMORY_LIMIT, inherited + MEMORY_LIMIT))
    signal.alarm(TIME_LIMIT + 5)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        message = job()
    except SystemExit as exc:
        message = "rc %s" % exc.code
    except BaseException as exc:       # what the user would see as a traceback
        message = exception_text(exc)
    os.write(report, message.encode()[:4000])
    os._exit(0)


def exception_text(exc):
    """"EXC type at file:line: message", the line the innermost frame of the project raised at."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(ROOT)) and "/.venv/" not in f.filename] or frames
    last = ours[-1]
    return "EXC %s at %s:%d: %s" % (type(exc).__name__, os.path.relpath(last.filename, ROOT),
                                    last.lineno, str(exc)[:200])


def tables_job(argv):
    def job():
        from plugin.__main__ import main
        return "rc %s" % main(argv)
    return job


def execute(path, argv):
    """(message, seconds, peak KB) of `python -m plugin ARGV` on one input, in a forked child."""
    return execute_job(tables_job(argv))


def execute_job(job):
    """(message, seconds, peak KB) of job() run in a forked child (limits: MEMORY_LIMIT,
    TIME_LIMIT); the message is what job returned, "EXC ..." for an exception escaping
    it, "DIED ..." when the child was killed."""
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            run_child(job, write_end)
        finally:
            os._exit(3)
    os.close(write_end)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - started
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    if not message:
        message = "DIED %s" % (("signal %d" % os.WTERMSIG(status)) if os.WIFSIGNALED(status)
                               else "status %d" % os.waitstatus_to_exitcode(status))
    return message, seconds, usage.ru_maxrss


def fuzz(seeds, seconds, seed, save=None, out=sys.stdout):
    """Run for `seconds`; returns the summary dict (and prints it)."""
    import plugin.__main__  # noqa: F401  (imported once, before forking)
    import plugin.render.tables  # noqa: F401
    rng = random.Random(seed)
    corpus = [(p, Path(p).read_bytes()) for p in seeds]
    corpus = [(p, d, hot_ranges(d)) for p, d in corpus]
    results = Counter()
    findings = {}
    slowest = (0.0, None)
    peak = (0, None)
    executions = 0
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input")
        while time.monotonic() < deadline:
            name, data, hot = rng.choice(corpus)
            mutated = mutate(rng, data, hot)
            with open(path, "wb") as handle:
                handle.write(mutated)
            argv = ["tables", path] + rng.choice(([], ["--json"], ["--address", hex(rng.randrange(1 << 22))]))
            message, took, rss = execute(path, argv)
            executions += 1
            label = message.split(" at ")[0] if not message.startswith("rc ") else message
            results[label] += 1
            if took > slowest[0]:
                slowest = (took, "%s (%d bytes, %s)" % (name, len(mutated), " ".join(argv[2:]) or "text"))
            if rss > peak[0]:
                peak = (rss, name)
            if not message.startswith("rc ") or took > TIME_LIMIT:
                key = message if took <= TIME_LIMIT else "SLOW %.1f s" % took
                if key not in findings:
                    findings[key] = mutated
                    if save:
                        Path(save).mkdir(parents=True, exist_ok=True)
                        (Path(save) / ("finding-%d" % len(findings))).write_bytes(mutated)
    summary = {"executions": executions, "outcomes": dict(results), "findings": sorted(findings),
               "slowest_seconds": round(slowest[0], 2), "slowest_input": slowest[1],
               "peak_rss_mb": round(peak[0] / 1024, 1), "peak_input": peak[1]}
    out.write("executions: %d\n" % executions)
    for label, count in results.most_common():
        out.write("  %6d  %s\n" % (count, label))
    out.write("findings (exceptions escaping main, or over %d s): %d\n" % (TIME_LIMIT, len(findings)))
    for key in sorted(findings):
        out.write("  %s\n" % key)
    out.write("slowest: %.2f s, %s\n" % (slowest[0], slowest[1]))
    out.write("peak RSS: %.1f MB (%s)\n" % (peak[0] / 1024, peak[1]))
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds", nargs="+", metavar="SEED_FILE")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", metavar="DIR", help="keep each finding's input here")
    args = parser.parse_args(argv)
    summary = fuzz(args.seeds, args.seconds, args.seed, args.save)
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
