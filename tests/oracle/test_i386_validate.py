"""i386 instruction analysis against GCC's own tables: `python -m plugin validate` on `gcc -m32` programs.

chain.c (tests/helpers/i386_programs.py) at -O0, -O2 and -O2
-fomit-frame-pointer, and the freestanding analysis_run.c, each with its
.eh_frame as GCC wrote it: at every instruction of every function the
analysis's row and the table's must agree (no `wrong`). Undecided are only
`_start` (the outermost frame, whose return address the table marks
undefined) and the `ret` of each pc thunk (`__x86.get_pc_thunk.bx`: the
table keeps ebx unchanged, the analysis knows the thunk overwrote it).
"""

import subprocess

import pytest

from i386_programs import BUILDS, program
from support import build, need_tool
from validate_support import validate

FREESTANDING = ["-ffreestanding", "-fno-stack-protector", "-nostdlib", "-static", "-no-pie", "-e", "run"]


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
def test_chain_i386_analysis_agrees_with_gcc_tables_everywhere(flags_name):
    report = validate(program(flags_name))
    assert report["arch"] == "i386"
    cfi = report["sources"]["cfi"]
    assert report["disagreements"] == [] and cfi["wrong"] == 0
    assert cfi["right"] >= 400 and cfi["right"] >= 0.95 * cfi["checked"], cfi
    assert cfi["unknown"] == _undecided_where_expected(program(flags_name)), cfi
    level2 = validate(program(flags_name), "--function", "level2")
    rows = [i["analysis"] for f in level2["functions_detail"] for i in f["instructions"]]
    assert rows[0] == "CFA=esp+4 => eip=[CFA-4]"
    if flags_name == "O0":                    # push ebp; mov ebp, esp: the caller's ebp at CFA-8
        assert "CFA=esp+8 => ebp=[CFA-8] eip=[CFA-4]" in rows, rows


@pytest.mark.parametrize("flags", [["-O2"], ["-O0", "-fPIC"], ["-Os"], ["-O2", "-fno-pie"]])
def test_freestanding_i386_analysis_agrees_with_gcc_tables(flags):
    path = build("analysis_run.c", ["-m32", *flags, *FREESTANDING], name="analysis_run-i386",
                 compiler=need_tool("gcc"))
    report = validate(path)
    cfi = report["sources"]["cfi"]
    assert cfi["wrong"] == 0 and cfi["right"] >= 150, cfi
    assert cfi["unknown"] == _undecided_where_expected(path), cfi


def _undecided_where_expected(path):
    """Undecided instructions of _start, and of the thunks' `ret` where the thunk overwrote a callee-saved register."""
    count = 0
    for name in ("_start", "__x86.get_pc_thunk.ax", "__x86.get_pc_thunk.bx", "__x86.get_pc_thunk.cx",
                 "__x86.get_pc_thunk.dx", "__x86.get_pc_thunk.si", "__x86.get_pc_thunk.di"):
        out = subprocess.run(["nm", str(path)], capture_output=True, text=True).stdout
        if " %s\n" % name not in out + "\n":
            continue
        report = validate(path, "--function", name)
        for function in report["functions_detail"]:
            for line in function["instructions"]:
                verdict = line["sources"].get("cfi", {}).get("verdict")
                if verdict == "unknown":
                    assert name == "_start" or line["instruction"] == "ret", line
                    count += 1
    return count
