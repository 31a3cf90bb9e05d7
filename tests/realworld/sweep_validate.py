"""Sweep: `python -m plugin validate --json` over every ELF file under some directories.

    python3 tests/realworld/sweep_validate.py [--timeout 120] [--memory-mb 2048] [--limit N]
                                              [--results FILE] [--shown N] PATH...

PATH is a directory (searched recursively) or a file; the files are those of
the table sweep (sweep_tables.elf_files: regular ELF files, each inode once).
Each file is checked in one process (`--jobs 1`: the sweep itself runs one
file at a time) under a time limit and an address-space limit. Per file:
its class (shared library, executable, kernel module, object, debug file),
exit status (a file validate refuses, exit 2 with no output: "refused", with
its message), functions, instructions, undecided (the analysis reached no
state), rows checked, wrong and undecided per source, CPU seconds, peak
memory, and its wrong rows (function, source, address, items). Prints
totals per class and every file with wrong rows.

--results FILE makes a long sweep resumable: each file's result is appended
to FILE (one JSON line) as soon as it is done, files already in FILE are not
run again, and the totals are those of every file in FILE under the PATHs.
"""

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_tables import PYTHON, elf_files  # noqa: E402
from sweep_worker import run_limited  # noqa: E402

KEPT_PER_FILE = 50          # wrong rows kept per file (all are counted)


def file_class(path: str) -> str:
    name = os.path.basename(path)
    if "/debug/" in path or name.endswith(".debug"):
        return "debug file"
    if name.endswith(".ko") or ".ko." in name:
        return "kernel module"
    if name.endswith(".o"):
        return "object"
    if ".so" in name:
        return "shared library"
    return "executable"


def check(path: str, timeout: float, memory_mb: int) -> dict:
    rc, out, cpu, peak, error = run_limited([PYTHON, "-m", "plugin", "validate", path, "--json", "--jobs", "1"],
                                            timeout, memory_mb)
    result = {"path": path, "class": file_class(path), "status": rc, "cpu": round(cpu, 2), "peak_kb": peak}
    if rc == 2 and not out.strip():
        result["refused"] = error      # a file validate does not check (its message says why)
        return result
    if rc not in (0, 1, 2):
        return result
    try:
        modules = json.loads(out)["modules"]
    except (ValueError, KeyError):
        result["status"] = "no JSON"
        return result
    totals = defaultdict(int)
    wrong = []
    for module in modules:
        for key in ("functions", "instructions", "unknown"):
            totals[key] += module[key]
        for summary in module["sources"].values():
            for key in ("checked", "wrong", "unknown"):
                totals["rows_" + key] += summary[key]
        for d in module["disagreements"]:
            wrong.append({"function": d["function"], "source": d["source"], "address": d["address"],
                          "items": [i["item"] for i in d["items"]]})
        result.setdefault("problems", []).extend(module["problems"][:3])
    if rc == 2:
        result["refused"] = "; ".join(result.get("problems", [])[:1]) or error     # an architecture not analysed
    result.update(totals)
    result["wrong_rows"] = wrong[:KEPT_PER_FILE]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--limit", type=int, default=None, help="stop after N new files")
    parser.add_argument("--results", help="append each file's result here; skip files already in it")
    parser.add_argument("--shown", type=int, default=3, help="wrong rows printed per file")
    args = parser.parse_args(argv)
    done = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    done[record["path"]] = record
    results, new = [], 0
    for path, _ in elf_files(args.paths):
        if path in done:
            results.append(done[path])
            continue
        if args.limit is not None and new >= args.limit:
            break
        record = check(path, args.timeout, args.memory_mb)
        new += 1
        results.append(record)
        if args.results:
            with open(args.results, "a") as handle:
                handle.write(json.dumps(record) + "\n")
    by_class = defaultdict(lambda: defaultdict(float))
    for record in results:
        row = by_class[record["class"]]
        row["files"] += 1
        row["refused"] += "refused" in record
        row["failed"] += record["status"] not in (0, 1) and "refused" not in record
        for key in ("functions", "instructions", "unknown", "rows_checked", "rows_wrong", "rows_unknown", "cpu"):
            row[key] += record.get(key, 0)
        row["files_with_wrong"] += bool(record.get("rows_wrong"))
    keys = ("files", "refused", "failed", "files_with_wrong", "functions", "instructions", "unknown", "rows_checked",
            "rows_wrong", "rows_unknown", "cpu")
    print("| class | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, row in sorted(by_class.items()):
        print("| %s | %s |" % (name, " | ".join("%d" % row[k] for k in keys)))
    for record in results:
        if record.get("rows_wrong"):
            print("%s: %d wrong rows" % (record["path"], record["rows_wrong"]))
            for w in record["wrong_rows"][:args.shown]:
                print("    %s %s 0x%x %s" % (w["source"], w["function"], w["address"], ",".join(w["items"])))
        elif record["status"] not in (0, 1):
            print("%s: status %s%s" % (record["path"], record["status"],
                                       ": " + record["refused"] if "refused" in record else ""))
    return 1 if any(r["status"] not in (0, 1) and "refused" not in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
