"""`unwind validate` live on 32-bit Arm: EHABI rows judged in a program run under qemu-arm (issue 33, item 5).

tests/fixtures/validate_planted_exidx.S plants a wrong `.save`, `.pad` and
`.setfp` (Arm code; arm-linux-gnueabihf-as writes the opcodes), called from
a Thumb-2 main (validate_planted_exidx_main.c: every call and return
interworks). The program runs under `qemu-arm -g PORT` and gdb-multiarch
steps one real call of each function. Where each error lies comes from the
assembler's symbols (bad_N_begin/bad_N_end, nm) and objdump's instruction
list; the truth is what the function's entry said (plugin.validate.live).
The planted call is wrong at exactly its instruction, the twin built with
-DCORRECT is clean, and the live verdicts equal the offline ones
(`python -m plugin validate`) on the instructions the call went through.

Then Debian 12's own armhf libc (tests/setup_debian_sysroots.sh): while
Debian's `sort` runs, the first call of every libc function readelf shows
with a runnable entry is stepped, and every EHABI row judged is right.
"""

import re
import subprocess

import pytest

from debian_sysroot import sysroot as debian_sysroot
from exidx_live import ARM, CALLS, programs
from gdbrun import run_gdb
from qemu_arm import qemu_arm
from support import need_tool
from validate_support import planted_ranges, validate, wrong, wrong_by_source


def _validate_calls(bare):
    actions = [(name, "json", "unwind validate -json %s" % name) for name, _ in CALLS]
    with qemu_arm(bare, []) as address:
        results, transcript = run_gdb(bare, actions, gdb_program="gdb-multiarch", remote=address, timeout=300)
    for name, _ in CALLS:
        assert "error" not in results[name], (name, results[name], transcript[-2000:])
        assert results[name]["complete"], (name, results[name]["ending_detail"])
    return results


@pytest.fixture(scope="module")
def planted():
    labelled, bare = programs(correct=False)
    return labelled, _validate_calls(bare)


def test_each_planted_ehabi_error_is_found_live_at_its_call(planted):
    labelled, reports = planted
    for name, number in CALLS:
        report = reports[name]
        expected = planted_ranges(labelled, (number,), ARM)
        assert len(expected) == 1 and set(expected) <= set(report["path"]), name
        assert wrong_by_source(report)["exidx"] == expected, name
        [miss] = report["wrong"]
        assert miss["instruction"].startswith("bl") and miss["row"], miss
        assert "cfa" in {i["item"] for i in miss["items"]}, miss        # each planted error moves the CFA
        # judged where EHABI claims to be exact: the entry and the call; the rest is not judged
        exidx = report["sources"]["exidx"]
        assert exidx["checked"] == 2 and exidx["right"] == 1 and exidx["unknown"] == []
        assert exidx["not_judged"] == report["instructions"] - 2


def test_live_equals_offline_on_the_path(planted):
    labelled, reports = planted
    offline = wrong(validate(labelled), "exidx")
    for name, _ in CALLS:
        path = set(reports[name]["path"])
        assert wrong_by_source(reports[name])["exidx"] == [a for a in offline if a in path], name


def test_the_correct_twin_is_clean_live():
    _, bare = programs(correct=True)
    reports = _validate_calls(bare)
    for name, _ in CALLS:
        report = reports[name]
        exidx = report["sources"]["exidx"]
        assert report["wrong"] == [] and exidx["right"] == exidx["checked"] == 2, (name, report)
        assert report["return_address"] & 1 == 0      # main is Thumb: the pc it resumes at, without bit 0


def _runnable_functions(library):
    """Names of the library's exported functions whose .ARM.exidx entry starts at them and is no
    EXIDX_CANTUNWIND (readelf -u and --dyn-syms: the oracle of which functions have a row to judge)."""
    listed = subprocess.run([need_tool(ARM + "readelf"), "-u", str(library)], capture_output=True, text=True,
                            check=True).stdout
    runnable = {int(m.group(1), 16) for m in re.finditer(r"^0x([0-9a-f]+): (?!0x1 \[cantunwind\])", listed, re.M)}
    symbols = subprocess.run([need_tool(ARM + "readelf"), "-W", "--dyn-syms", str(library)], capture_output=True,
                             text=True, check=True).stdout
    names = set()
    for line in symbols.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "FUNC" and parts[6] != "UND" and int(parts[1], 16) & ~1 in runnable:
            names.add(parts[7].split("@")[0])
    return sorted(names)


def test_debian_armhf_libc_rows_are_right_live():
    """Debian's sort (no .symtab, no CFI: .ARM.exidx only) sorting /etc/passwd: validate at the first
    call of every libc function with a runnable entry (tests/helpers/ehabi_sweep_gdb.py)."""
    sysroot = debian_sysroot("armhf")
    binary = sysroot / "usr/bin/sort"
    functions = _runnable_functions(sysroot / "lib/arm-linux-gnueabihf/libc.so.6")
    assert len(functions) >= 400
    with qemu_arm(binary, ["/etc/passwd"], sysroot=sysroot) as address:
        results, transcript = run_gdb(binary, [("sweep", "py", "__import__('ehabi_sweep_gdb').sweep(%r)" % functions)],
                                      breakpoint="__libc_start_main", gdb_program="gdb-multiarch",
                                      remote=address, timeout=600,
                                      setup=["set sysroot %s" % sysroot, "set breakpoint pending on"])
    reports = results["sweep"]
    assert [r for r in reports if "error" in r] == [], transcript[-2000:]
    rows = {"checked": 0, "right": 0, "wrong": 0, "undecided": 0}
    for report in reports:
        exidx = report["sources"]["exidx"]
        assert report["complete"], (report["function"], report["ending_detail"])
        assert report["wrong"] == [] and exidx["unknown"] == [], report
        rows["checked"] += exidx["checked"]
        rows["right"] += exidx["right"]
        rows["wrong"] += len(exidx["wrong"])
        rows["undecided"] += len(exidx["unknown"])
    print("sort: %d libc functions validated live: %s" % (len(reports), rows))
    assert len(reports) >= 15 and rows["checked"] == rows["right"] >= 45
