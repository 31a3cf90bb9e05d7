"""The sweep (tests/realworld/sweep_tables.py) on a fixed set of real files
nobody here wrote: every FDE range and row of `python -m plugin tables` equals
readelf's and llvm-dwarfdump-16's, no file fails, none has a bad entry."""

import contextlib
import glob
import io
import subprocess
from pathlib import Path

import sweep_tables
from support import build, need_tool, system_library


def fixed_subset():
    libcc1 = subprocess.run(["gcc", "-print-file-name=libcc1.so"], capture_output=True, text=True).stdout
    extension = sorted(glob.glob("/usr/lib/python3*/lib-dynload/_json.cpython-*-x86_64-linux-gnu.so"))
    assert extension, "no Python extension module found"
    return [str(system_library("libc.so.6")), str(system_library("libstdc++.so.6")),
            str(system_library("libgcrypt.so.20")), str(Path(libcc1.strip()).resolve()),
            extension[0], "/usr/lib/x86_64-linux-gnu/crt1.o"]


def test_fixed_subset_agrees_with_readelf_and_llvm_dwarfdump():
    need_tool("readelf")
    need_tool(sweep_tables.LLVM_DWARFDUMP)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = sweep_tables.main(["--jobs", "1", *fixed_subset()])
    report = out.getvalue()
    assert status == 0, report
    assert "files: 6 x86_64 ELF" in report, report
    assert "files with differences: 0" in report and "failed (exit 2, timeout, memory): 0" in report
    assert "exit 1 (some entries bad): 0 files" in report, report
    fdes = int(report.split("FDEs: ")[1].split(",")[0])
    assert fdes > 5000, report
    # libgcrypt's two FDEs where llvm-dwarfdump drops the offset (readelf agrees with us).
    assert "not compared): 2" in report, report


def sweep(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = sweep_tables.main(["--jobs", "1", *argv])
    return status, out.getvalue()


def totals(report):
    return report.split("FDEs: ")[1].split("\n")[0]


def test_results_file_resumes_and_the_worker_agrees_with_a_process_per_file(tmp_path):
    need_tool("readelf")
    need_tool(sweep_tables.LLVM_DWARFDUMP)
    files = fixed_subset()
    first, second = [files[5], files[4]], files[2]          # crt1.o, an extension module; libgcrypt
    log = tmp_path / "results.jsonl"
    status, report = sweep("--results", str(log), *first)
    assert status == 0 and len(log.read_text().splitlines()) == 2, report
    status, resumed = sweep("--results", str(log), *first, second)
    assert status == 0 and "2 results were read from %s" % log in resumed, resumed
    assert len(log.read_text().splitlines()) == 3
    status, whole = sweep("--worker-mb", "0", *first, second)     # each file in a process of its own
    assert status == 0 and totals(whole) == totals(resumed), (whole, resumed)
    assert int(totals(whole).split(",")[0]) > 1600, whole


def test_a_cie_restoring_a_register_inside_itself_is_counted_not_failed():
    """tests/fixtures/cie_restore.s: a CIE that saves rbx and restores it in its own
    instructions. readelf keeps rbx's rule, GDB and we drop it, llvm-dwarfdump prints no
    row: the sweep counts the FDE as a known difference and passes."""
    need_tool("readelf")
    need_tool(sweep_tables.LLVM_DWARFDUMP)
    binary = build("cie_restore.s", ["-nostdlib", "-static", "-Wl,--eh-frame-hdr"])
    status, report = sweep(str(binary))
    assert status == 0, report
    assert "files with differences: 0" in report and "FDEs: 1," in report, report
    assert "restores a register inside itself (readelf keeps the rule, GDB and we do not; not compared): 1" \
        in report, report
