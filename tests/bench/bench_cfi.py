"""Benchmark: decode every FDE's full row table of the system libc.so.6.

Run: python3 tests/bench/bench_cfi.py [path-to-ELF]

Times plugin.formats.cfi (parse the section, execute() every FDE) and, in
the same run on the same section, pyelftools (EH_CFI_entries(), then
get_decoded() on every FDE). Prints both, their ratio, rows per second,
and the cost of one row_at() lookup (what the unwinder pays per frame).
Each side runs on a fresh decoder object, so no cache carries over between
repetitions; the best of REPEAT runs is reported.
"""

import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from elftools.dwarf.callframe import FDE as ElfToolsFDE  # noqa: E402
from elftools.elf.elffile import ELFFile  # noqa: E402

from plugin.arch import x86_64  # noqa: E402
from plugin.formats.cfi import CfiSection, execute, row_at  # noqa: E402
from plugin.memory import Region  # noqa: E402

REPEAT = 3


def libc_path():
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split()[0] == "libc.so.6" and "x86-64" in parts[0]:
            return Path(parts[1]).resolve()
    return Path("/lib/x86_64-linux-gnu/libc.so.6").resolve()


def ours(address, data):
    section = CfiSection(Region.from_bytes(".eh_frame", address, data), "eh_frame", x86_64.ARCH)
    fdes = section.fdes()
    rows = sum(len(execute(fde, x86_64.ARCH)) for fde in fdes)
    return len(fdes), rows


def pyelftools(path):
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        fdes = rows = failed = 0
        for entry in dwarf.EH_CFI_entries():
            if isinstance(entry, ElfToolsFDE):
                fdes += 1
                try:
                    rows += len(entry.get_decoded().table)
                except Exception:       # pyelftools 0.33 has no DW_CFA_GNU_args_size rows
                    failed += 1
    return fdes, rows, failed


def best(function, *args):
    times, result = [], None
    for _ in range(REPEAT):
        start = time.perf_counter()
        result = function(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else libc_path()
    with open(path, "rb") as f:
        section = ELFFile(f).get_section_by_name(".eh_frame")
        address, data = section["sh_addr"], section.data()
    print("input: %s (.eh_frame 0x%x bytes at 0x%x)" % (path, len(data), address))

    our_time, (our_fdes, our_rows) = best(ours, address, data)
    ref_time, (ref_fdes, ref_rows, ref_failed) = best(pyelftools, path)
    print("plugin.formats.cfi: %5d FDEs %6d rows  %.3f s  %9.0f rows/s"
          % (our_fdes, our_rows, our_time, our_rows / our_time))
    print("pyelftools:         %5d FDEs %6d rows  %.3f s  %9.0f rows/s"
          % (ref_fdes, ref_rows, ref_time, ref_rows / ref_time))
    print("ratio: pyelftools time / ours = %.1fx" % (ref_time / our_time))
    if ref_failed:
        print("note: pyelftools could not decode %d FDE(s) (it raised; counted as 0 rows)"
              % ref_failed)
    if (our_fdes, our_rows) != (ref_fdes, ref_rows) and not ref_failed:
        print("note: FDE/row counts differ")

    # One lookup per frame, as the unwinder does it: a cached section, a
    # random FDE, a random pc in it (find_fde + row_at).
    section = CfiSection(Region.from_bytes(".eh_frame", address, data), "eh_frame", x86_64.ARCH)
    fdes = [f for f in section.fdes() if f.end > f.start]
    rng = random.Random(1)
    pcs = [rng.randrange(f.start, f.end) for f in (rng.choice(fdes) for _ in range(10000))]
    start = time.perf_counter()
    for pc in pcs:
        row_at(section.find_fde(pc), pc, x86_64.ARCH)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for pc in pcs:
        row_at(section.find_fde(pc), pc, x86_64.ARCH)
    warm = time.perf_counter() - start
    print("find_fde + row_at: %.1f us per frame first time, %.1f us once the FDE is decoded"
          % (cold / len(pcs) * 1e6, warm / len(pcs) * 1e6))


if __name__ == "__main__":
    main()
