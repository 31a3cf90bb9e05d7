"""Arm and Thumb-2 instruction analysis against GCC's own tables: `python -m plugin validate`.

tests/fixtures/analysis_run.c (with analysis_run_arm.S) built by
arm-linux-gnueabihf-gcc -g for Arm and Thumb-2 at -O0, -O2, -O3 and -Os:
at every instruction of every function with a .debug_frame FDE the
analysis's row and the table's must agree, and the analysis must decide
each of them. Thumb functions (their symbol's value has bit 0 set) are
read as Thumb: read as Arm code they disagree with the tables.
"""

import hashlib

import pytest

from support import FIXTURES, build, need_tool
from validate_support import validate

ASM = FIXTURES / "analysis_run_arm.S"
FREESTANDING = ["-ffreestanding", "-fno-stack-protector", "-nostdlib", "-static", "-e", "run"]
BUILDS = {"%s-%s" % (mode, level): ["-m" + mode, "-" + level]
          for mode in ("thumb", "arm") for level in ("O0", "O2", "O3", "Os")}


def _program(name):
    digest = hashlib.sha256(ASM.read_bytes()).hexdigest()[:8]
    return build("analysis_run.c", [*BUILDS[name], *FREESTANDING, str(ASM), "-lgcc"],
                 name="analysis_run-arm-" + digest, compiler=need_tool("arm-linux-gnueabihf-gcc"))


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_arm_analysis_agrees_with_gcc_debug_frame_everywhere(name):
    report = validate(_program(name))
    assert report["arch"] == "arm"
    cfi = report["sources"]["cfi"]
    assert report["disagreements"] == [] and cfi["wrong"] == 0 and cfi["unknown"] == 0, cfi
    assert cfi["right"] >= 250 and report["functions"] >= 13, (cfi, report["functions"])
    detail = validate(_program(name), "--function", "with_alloca")
    [function] = detail["functions_detail"]
    lines = function["instructions"]
    assert any(line["instruction"].startswith(("push", "str")) for line in lines)
    halfwords = [line["address"] for line in lines if line["address"] % 4 == 2]
    assert bool(halfwords) == name.startswith("thumb"), [(hex(l["address"]), l["instruction"]) for l in lines]
