"""`validate` checks ARM EHABI (.ARM.exidx/.ARM.extab) rows against Arm and Thumb-2 code.

EHABI opcodes describe a function's body where it calls, so they are judged
at calls (and by the entry rule at the function's first instruction).
tests/fixtures/validate_planted_exidx.S plants a wrong `.save`, `.pad` and
`.setfp` (arm-linux-gnueabihf-as turns them into the opcodes); where each
lies comes from the assembler's symbols (arm-linux-gnueabihf-nm) and
objdump's instruction list: every planted call is wrong, nothing else, and
the twin is clean. GCC's own tables for tests/fixtures/analysis_run.c, Arm
and Thumb-2 at -O0 to -Os (test_arm_validate.py's builds, with -funwind-tables), are clean.
"""

import pytest

from support import FIXTURES, build, need_tool
from test_arm_validate import BUILDS
from validate_support import planted_ranges, validate, wrong

ARM = "arm-linux-gnueabihf-"
SO = ["-shared", "-nostdlib"]
SHARED = ["-ffreestanding", "-fno-stack-protector", "-nostdlib", "-shared", "-fPIC"]


@pytest.fixture(scope="module")
def pair():
    compiler = need_tool(ARM + "gcc")
    source = "validate_planted_exidx.S"
    return (build(source, SO, compiler=compiler),
            build(source, SO + ["-DCORRECT"], name="validate_planted_exidx_correct", compiler=compiler))


def test_every_planted_ehabi_error_is_found_at_its_calls(pair):
    planted, _ = pair
    report = validate(planted)
    assert report["arch"] == "arm" and report["unknown"] == 0
    expected = planted_ranges(planted, (12, 13, 14), ARM)
    assert len(expected) == 3
    assert wrong(report, "exidx") == expected
    items = {d["function"]: {i["item"] for i in d["items"]} for d in report["disagreements"]}
    assert items == {"save_wrong": {"cfa", "r4"}, "pad_wrong": {"cfa"}, "setfp_wrong": {"cfa"}}


def test_the_correct_twin_is_clean(pair):
    _, twin = pair
    exidx = validate(twin)["sources"]["exidx"]
    assert exidx["wrong"] == 0 and exidx["unknown"] == 0 and exidx["right"] == 6


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_gcc_ehabi_tables_agree_with_the_code(name):
    # a shared object: the personality routines the index names (__aeabi_unwind_cpp_pr0/1) stay undefined
    program = build("analysis_run.c", [*BUILDS[name], *SHARED, str(FIXTURES / "analysis_run_arm.S"),
                                       "-funwind-tables"],
                    name="analysis_run-arm-exidx", compiler=need_tool(ARM + "gcc"))
    report = validate(program)
    exidx = report["sources"]["exidx"]
    assert [d for d in report["disagreements"] if d["source"] == "exidx"] == []
    assert exidx["wrong"] == 0 and exidx["right"] >= 5, exidx
