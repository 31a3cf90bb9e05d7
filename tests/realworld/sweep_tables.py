"""Sweep: `python -m plugin tables` over every ELF file under some directories,
against readelf --debug-dump=frames-interp and llvm-dwarfdump-16 --eh-frame.

    python3 tests/realworld/sweep_tables.py [--jobs 2] [--timeout 120] [--memory-mb 1024]
                                            [--limit N] [--progress] [--results FILE]
                                            [--worker-mb MB] PATH...

PATH is a directory (searched recursively) or a file. Per x86_64 ELF file
(others are counted and skipped) it runs the offline command with --json
under a time limit and an address-space limit, and both tools, then
compares, per CFI section:
- readelf: every FDE's range, and its rows: address, CFA and each register
  column readelf prints (rows merged where nothing changes, rows at or past
  the FDE's end dropped, an FDE without rows given its CIE's initial row:
  readelf's ways of printing the same table; rows that cover nothing, as
  an empty FDE's, are dropped on both sides);
- llvm-dwarfdump (.eh_frame only): every FDE's range, and each row's address
  and CFA.
Known differences are counted, not compared: FDEs where llvm-dwarfdump drops
an offset after an expression CFA, and FDEs of a CIE that restores a register
inside itself (sweep_readelf.py).
Prints totals, the differences (first few per file), files the offline
command failed on (exit 2, timeout, memory), and the slowest files with
their time against readelf's. Exit status 1 when anything differs or failed.

--results FILE makes a long sweep resumable: each file's result is appended
to FILE (one JSON line) as soon as it is done, files already in FILE are not
run again, and the totals are those of every file in FILE under the PATHs.
"""

import argparse
import io
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweep_readelf import merged, readelf_tables, self_restoring_fdes
from sweep_worker import Worker, run_limited

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
LLVM_DWARFDUMP = "llvm-dwarfdump-16"
SHOWN_PER_FILE = 3
KEPT_PER_FILE = 50        # differences kept per file (all are counted)
# readelf's names where ours differ: the return-address column is "ra"; the
# plugin names DWARF 17-32 (xmm0-15) by number, which unwinding never needs.
X86_64_NAMES = {"rip": "ra", **{"r%d" % n: "xmm%d" % (n - 17) for n in range(17, 33)}}


def elf_files(paths):
    """Regular x86_64-or-other ELF files under paths, each inode once."""
    seen = set()
    for top in paths:
        walk = [(top, [], [os.path.basename(top)])] if os.path.isfile(top) else os.walk(top)
        for folder, _, names in walk:
            for name in names:
                path = os.path.join(os.path.dirname(top), name) if os.path.isfile(top) else os.path.join(folder, name)
                try:
                    st = os.stat(path)
                    if not os.path.stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen or st.st_size < 64:
                        continue
                    with open(path, "rb") as handle:
                        head = handle.read(20)
                except OSError:
                    continue
                if head[:4] == b"\x7fELF":
                    seen.add((st.st_dev, st.st_ino))
                    yield path, head[18] | head[19] << 8 == 62


# --- the tools' output -------------------------------------------------------------------

LLVM_FDE = re.compile(r"[0-9a-f]{8,} [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.\.([0-9a-f]+)")
LLVM_ROW = re.compile(r"\s+0x([0-9a-f]+): CFA=([^:]*)")
SIMPLE_CFA = re.compile(r"[a-z0-9]+([+-]\d+)?")


def llvm_tables(text):
    """{(start, end): [(address, cfa)]} of .eh_frame from llvm-dwarfdump --eh-frame."""
    out, current, in_eh = {}, None, False
    for line in text.splitlines():
        if line.startswith(".eh_frame contents"):
            in_eh = True
            continue
        if line.startswith(".") and line.endswith("contents:"):
            in_eh = False
        if not in_eh:
            continue
        fde = LLVM_FDE.match(line)
        if fde:
            key = (int(fde.group(1), 16), int(fde.group(2), 16))
            current = [] if key in out else out.setdefault(key, [])     # of equal ranges the first counts
            continue
        row = LLVM_ROW.match(line)
        if row and current is not None:
            current.append((int(row.group(1), 16), _cfa_text(row.group(2).lower().replace(" ", ""))))
    return {key: merged([(a, c, {}) for a, c in rows if a < key[1]]) for key, rows in out.items()}


def _cfa_text(text):
    return text if SIMPLE_CFA.fullmatch(text) else "exp"


# --- ours ------------------------------------------------------------------------------------

def our_sources(data):
    """(source head, None) at each source and (source head, entry) for each of
    its entries in our --json output (bytes), read a line at a time: the
    command writes each source's head and each entry on a line of its own, so
    a whole file's tree (gigabytes for libLLVM) is never built. Output in any
    other layout is parsed whole."""
    if not data.startswith(b'{"sources": [\n'):
        for source in json.loads(data)["sources"]:
            yield source, None
            for entry in source["entries"]:
                yield source, entry
        return
    decode = json.JSONDecoder().raw_decode
    head = None
    lines = io.BytesIO(data)
    next(lines)                             # '{"sources": ['
    for line in lines:
        text = line.decode()
        if text.startswith('{"kind"'):
            head = json.loads(text.split(', "entries": [', 1)[0] + "}")
            yield head, None
        elif text.startswith('{"'):
            yield head, decode(text)[0]


def our_tables(data):
    """({section: {(start, end): [(address, cfa, {column: rule})]}}, {(start, end) of
    FDEs with a noted row}) from our --json output (bytes)."""
    out, noted = {}, set()
    for source, entry in our_sources(data):
        if source["kind"] != "cfi":
            continue
        fdes = out.setdefault(source["section"], {})
        if entry is not None:
            rows = [(r["address"], _our_cfa(r["cfa"]),
                     {X86_64_NAMES.get(n, n): _our_rule(rule) for n, rule in r["registers"].items()})
                    for r in entry["rows"] if r["address"] < entry["end"]]    # an empty FDE's row covers nothing
            rows = [(a, c, {k: v for k, v in regs.items() if v != "u"}) for a, c, regs in rows]
            fdes.setdefault((entry["start"], entry["end"]), merged(rows))     # the first of equal ranges
            if any(r.get("note") for r in entry["rows"]):
                noted.add((entry["start"], entry["end"]))
    return out, noted


def _our_cfa(cfa):
    if cfa["kind"] != "register":
        return "exp"
    return "%s%+d" % (cfa["register"], cfa["offset"])


RULE_TEXT = {"undefined": "u", "same": "s", "expression": "exp", "val_expression": "vexp"}


def _our_rule(rule):
    kind = rule["kind"]
    if kind == "offset":
        return "c%+d" % rule.get("offset", 0)
    if kind == "val_offset":
        return "v%+d" % rule.get("offset", 0)
    if kind == "register":
        return rule.get("register", "r")
    return RULE_TEXT.get(kind, kind)


# --- comparing ---------------------------------------------------------------------------

def compare_file(path, args):
    """A result dict for one file."""
    if args.worker_mb and os.path.getsize(path) <= args.worker_mb << 20:
        rc, out, ours_s, peak = _worker(args).run(path, args.timeout)
    else:
        cmd = [PYTHON, "-m", "plugin", "tables", path, "--json"]
        rc, out, ours_s, peak, _ = run_limited(cmd, args.timeout, args.memory_mb)
    result = {"path": path, "rc": rc, "seconds": ours_s, "peak_kb": peak, "fdes": 0, "rows": 0,
              "differences": []}
    _, readelf_out, readelf_s, _, _ = run_limited(["readelf", "--debug-dump=frames-interp", path], args.timeout)
    result["readelf_seconds"] = readelf_s
    if rc == 2 and _is_x32(path):
        result["rc"] = "x32"        # refused by the command in one line, as it should be
    if rc not in (0, 1):
        return result
    _, llvm_out, llvm_s, _, _ = run_limited([LLVM_DWARFDUMP, "--eh-frame", path], args.timeout)
    result["llvm_seconds"] = llvm_s
    ours, noted = our_tables(out)
    out = None
    theirs = readelf_tables(readelf_out.decode(errors="replace"))
    llvm = llvm_tables(llvm_out.decode(errors="replace"))
    for section in (".eh_frame", ".debug_frame"):
        result["fdes"] += len(ours.get(section, {}))
        result["rows"] += sum(len(r) for r in ours.get(section, {}).values())
    result["differences"] = _differences(ours, noted, theirs, llvm, {})
    if result["differences"]:
        # A CIE that restores a register inside itself (sweep_readelf): counted, not compared.
        restoring = self_restoring_fdes(path, args.timeout)
        result["known_cie_restore"] = sum(len(restoring.get(s, set()) & set(ours.get(s, {}))) for s in restoring)
        if result["known_cie_restore"]:
            result["differences"] = _differences(ours, noted, theirs, llvm, restoring)
    result["known_llvm"] = len(noted & set(ours.get(".eh_frame", {})))
    return result


def _differences(ours, noted, theirs, llvm, skip):
    """The differences of our tables from readelf's and llvm-dwarfdump's, the FDEs in
    skip ({section: {(start, end)}}) left out."""
    diffs = []
    for section in (".eh_frame", ".debug_frame"):
        left = skip.get(section, set())
        mine = {k: v for k, v in ours.get(section, {}).items() if k not in left}
        other = {k: v for k, v in theirs.get(section, {}).items() if k not in left}
        _diff(diffs, "readelf", section, mine, other, lambda rows: rows)
    # llvm-dwarfdump drops the offset where DW_CFA_def_cfa_register follows an
    # expression; readelf, libgcc and GDB (and we) keep it: counted, not compared.
    left = (noted & set(ours.get(".eh_frame", {}))) | skip.get(".eh_frame", set())
    mine = {k: v for k, v in ours.get(".eh_frame", {}).items() if k not in left}
    theirs_llvm = {k: v for k, v in llvm.items() if k not in left}
    _diff(diffs, "llvm-dwarfdump", ".eh_frame", mine, theirs_llvm,
          lambda rows: merged([(a, re.sub(r"\+0$", "", c), {}) for a, c, _ in rows]))
    return diffs


def _is_x32(path):
    """A 32-bit ELF file for x86-64 (the x32 ABI), which the plugin does not read."""
    with open(path, "rb") as handle:
        head = handle.read(20)
    return head[4] == 1 and head[18] | head[19] << 8 == 62


_WORKERS = threading.local()


def _worker(args):
    """This thread's sweep_worker.Worker."""
    if not hasattr(_WORKERS, "worker"):
        _WORKERS.worker = Worker(PYTHON, args.memory_mb)
    return _WORKERS.worker


def _diff(diffs, tool, section, mine, other, view):
    for key in sorted(set(mine) ^ set(other)):
        diffs.append("%s %s: FDE [0x%x, 0x%x) only in %s" % (tool, section, key[0], key[1],
                                                          "ours" if key in mine else tool))
    for key in sorted(set(mine) & set(other)):
        a, b = view(mine[key]), other[key]
        if a != b:
            first = next(((x, y) for x, y in zip(a, b) if x != y), (a[len(b):][:1], b[len(a):][:1]))
            diffs.append("%s %s: FDE [0x%x, 0x%x) rows differ: ours %s, %s %s"
                         % (tool, section, key[0], key[1], first[0], tool, first[1]))


def _guarded(compare, path, args):
    """compare(path, args), or a failed result saying what the sweep itself could not parse."""
    try:
        return compare(path, args)
    except Exception as exc:        # a parser gap here must not end a sweep of thousands of files
        return {"path": path, "rc": "sweep error: %s: %s" % (type(exc).__name__, exc), "seconds": 0,
                "peak_kb": 0, "fdes": 0, "rows": 0, "differences": [], "readelf_seconds": 0}


def _load_results(name, files):
    """{path: result} of the files among `files` already in the results file `name`."""
    wanted, done = set(files), {}
    if name and os.path.exists(name):
        with open(name) as log:
            for line in log:
                if line.strip():
                    result = json.loads(line)
                    if result["path"] in wanted and not str(result["rc"]).startswith("sweep error"):
                        done[result["path"]] = result
    return done


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per file and tool")
    parser.add_argument("--memory-mb", type=int, default=1024, help="address-space limit of the plugin")
    parser.add_argument("--limit", type=int, help="only the first N ELF files")
    parser.add_argument("--slowest", type=int, default=10)
    parser.add_argument("--progress", action="store_true", help="a line per file on stderr as it is done")
    parser.add_argument("--worker-mb", type=int, default=4, metavar="MB",
                        help="files up to MB are run in a long-lived worker process (sweep_worker.py), "
                             "larger ones each in a process of its own; 0: every file in its own")
    parser.add_argument("--results", metavar="FILE",
                        help="append each file's result to FILE as it is done; skip files already there")
    parser.add_argument("--summary", action="store_true",
                        help="with --results: only print the totals of the files already in FILE")
    args = parser.parse_args(argv)
    files, skipped = [], 0
    for path, x86_64 in elf_files(args.paths):
        if x86_64:
            files.append(path)
        else:
            skipped += 1
        if args.limit and len(files) >= args.limit:
            break
    started = time.monotonic()
    done = _load_results(args.results, files)
    results = list(done.values())
    todo = [] if args.summary else [path for path in files if path not in done]
    with ThreadPoolExecutor(args.jobs) as pool:
        for n, result in enumerate(pool.map(lambda p: _guarded(compare_file, p, args), todo), len(done) + 1):
            result["difference_count"] = len(result["differences"])
            del result["differences"][KEPT_PER_FILE:]
            results.append(result)
            if args.results:
                with open(args.results, "a") as log:
                    log.write(json.dumps(result) + "\n")
            if args.progress:
                sys.stderr.write("%d/%d rc=%s %.2fs fdes=%d diffs=%d %s\n" % (
                    n, len(files), result["rc"], result["seconds"], result["fdes"],
                    result["difference_count"], result["path"]))
                sys.stderr.flush()
    x32 = [r for r in results if r["rc"] == "x32"]
    failed = [r for r in results if r["rc"] not in (0, 1, "x32")]
    some_bad = [r for r in results if r["rc"] == 1]
    differing = [r for r in results if r["differences"]]
    print("files: %d x86_64 ELF%s (%d other ELF skipped), wall %.0f s%s" % (
        len(files), " (%d done)" % len(results) if len(results) < len(files) else "", skipped, time.monotonic() - started,
        " (this run; %d results were read from %s)" % (len(done), args.results) if done else ""))
    print("FDEs: %d, rows (merged): %d" % (sum(r["fdes"] for r in results), sum(r["rows"] for r in results)))
    print("CPU time: ours %.1f s, readelf %.1f s, llvm-dwarfdump %.1f s (sums over files)" % (
        sum(r["seconds"] for r in results), sum(r["readelf_seconds"] for r in results),
        sum(r.get("llvm_seconds", 0) for r in results)))
    print("FDEs where llvm-dwarfdump drops the offset after an expression CFA (not compared): %d"
          % sum(r.get("known_llvm", 0) for r in results))
    print("FDEs whose CIE restores a register inside itself (readelf keeps the rule, GDB and we do not; "
          "not compared): %d" % sum(r.get("known_cie_restore", 0) for r in results))
    print("x32 files, refused by the command in one line (exit 2) and not compared: %d" % len(x32))
    print("exit 1 (some entries bad): %d files; failed (exit 2, timeout, memory): %d" % (len(some_bad), len(failed)))
    for r in failed:
        print("  FAILED %s: %s" % (r["path"], r["rc"]))
    print("files with differences: %d" % len(differing))
    for r in differing:
        print("  %s: %d differences" % (r["path"], r["difference_count"]))
        for line in r["differences"][:SHOWN_PER_FILE]:
            print("    " + line)
    print("peak RSS of ours: %.0f MB (%s)" % (max((r["peak_kb"], r["path"]) for r in results)[0] / 1024,
                                              max((r["peak_kb"], r["path"]) for r in results)[1]))
    print("slowest (CPU seconds):")
    for r in sorted(results, key=lambda r: -r["seconds"])[:args.slowest]:
        print("  %6.2f s (readelf %.2f s) %s" % (r["seconds"], r["readelf_seconds"], r["path"]))
    return 1 if failed or differing else 0


if __name__ == "__main__":
    sys.exit(main())
