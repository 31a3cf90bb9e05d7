"""Benchmark: `python -m plugin tables` (text and --json) against readelf
--debug-dump=frames-interp and llvm-dwarfdump-16 --eh-frame on the same files
in the same run, as ratios of CPU time (user+sys of each child, wait4), with
the plugin's peak RSS. Issue 23's targets: text within 5x readelf, --json
within 10x llvm-dwarfdump and under 200 MB for libLLVM.

Run: python3 tests/bench/bench_tables.py [FILE...]   (default: libc.so.6 and libLLVM-16)
     python3 tests/bench/bench_tables.py --together PATH...
The second form is the whole-system figure: every x86_64 ELF file under the
PATHs (directories or files; x32 files left out) in ONE plugin process
(`tables FILE...`, text) against one readelf over the same files.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "realworld"))

from sweep_tables import LLVM_DWARFDUMP, PYTHON, _is_x32, elf_files, run_limited  # noqa: E402

DEFAULT = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"]
TIMEOUT = 600


def measure(path):
    plugin = [PYTHON, "-m", "plugin", "tables", path]
    _, text_out, text_s, text_kb, _ = run_limited(plugin, TIMEOUT)
    _, _, json_s, json_kb, _ = run_limited(plugin + ["--json"], TIMEOUT)
    _, _, readelf_s, _, _ = run_limited(["readelf", "--debug-dump=frames-interp", path], TIMEOUT)
    _, _, llvm_s, llvm_kb, _ = run_limited([LLVM_DWARFDUMP, "--eh-frame", path], TIMEOUT)
    return {"text": text_s, "json": json_s, "readelf": readelf_s, "llvm": llvm_s,
            "text_mb": text_kb / 1024, "json_mb": json_kb / 1024, "llvm_mb": llvm_kb / 1024,
            "bytes": len(text_out)}


def measure_together(paths):
    """Every x86_64 ELF file under paths in one process each: the plugin's text mode and readelf.
    x32 files, which the plugin refuses in one line, are left out of both."""
    files = sorted(path for path, is_x86_64 in elf_files(paths) if is_x86_64 and not _is_x32(path))
    status, out, plugin_s, plugin_kb, _ = run_limited([PYTHON, "-m", "plugin", "tables", *files], 3600)
    _, readelf_out, readelf_s, _, _ = run_limited(["readelf", "--debug-dump=frames-interp", *files], 3600)
    print("%d x86_64 ELF files (each inode once) under %d paths" % (len(files), len(paths)))
    print("  text, one process: %7.2f s CPU, %5.0f MB, exit %s, %d MB out" % (
        plugin_s, plugin_kb / 1024, status, len(out) >> 20))
    print("  readelf:           %7.2f s CPU, %d MB out: %5.1fx" % (
        readelf_s, len(readelf_out) >> 20, plugin_s / max(readelf_s, 0.01)))


def main(argv):
    if argv[:1] == ["--together"]:
        measure_together(argv[1:])
        return
    files = [f for f in (argv or DEFAULT) if os.path.exists(f)]
    for path in files:
        m = measure(os.path.realpath(path))
        print("%s" % path)
        print("  text:   %6.2f s CPU, %5.0f MB; readelf %5.2f s: %5.1fx" % (
            m["text"], m["text_mb"], m["readelf"], m["text"] / max(m["readelf"], 0.01)))
        print("  --json: %6.2f s CPU, %5.0f MB; llvm-dwarfdump %5.2f s (%3.0f MB): %5.1fx" % (
            m["json"], m["json_mb"], m["llvm"], m["llvm_mb"], m["json"] / max(m["llvm"], 0.01)))


if __name__ == "__main__":
    main(sys.argv[1:])
