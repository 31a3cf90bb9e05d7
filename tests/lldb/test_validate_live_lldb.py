"""`unwind validate` in LLDB (16, 19, 22): the planted errors found at their exact instructions, live.

Same oracle as tests/gdb/test_validate_live_gdb.py: the assembler's bad_N labels
(nm) and objdump's instructions locate each planted error; the instructions
a call went through are those LLDB stopped at. Live and offline agree
wherever the offline mode is sure, and the correct twin is clean.
"""

import json
import shutil

from lldbrun import batch_json, batch_outputs, run_batch
from qemu_user import qemu_user
from support import FIXTURES
from validate_support import (A64, LIVE_CALLS, LIVE_CALLS_AARCH64, SFRAME_CANNOT_SAY, live_program,
                              planted_ranges, validate, wrong, wrong_by_source)


def _validate_each_call(program):
    commands = ["breakpoint set -n stop_here", "run"]
    commands += ["unwind validate --json %s" % name for name, _ in LIVE_CALLS]
    status, transcript = run_batch(program, commands)
    assert status == 0, transcript[-3000:]
    reports, seen = [], 0
    for command, output in batch_outputs(transcript):
        if command.startswith("unwind validate"):
            reports.append(_json(output))
            seen += 1
    assert seen == len(LIVE_CALLS), transcript[-3000:]
    return reports


def _json(output):
    return json.loads(output[output.index("{"):])


def test_planted_errors_found_live_and_agreeing_with_offline():
    labelled, bare = live_program(correct=False)
    reports = _validate_each_call(bare)
    offline = validate(labelled)
    for (name, errors), report in zip(LIVE_CALLS, reports):
        assert report["complete"], report
        path = set(report["path"])
        expected = planted_ranges(labelled, errors)
        assert set(expected) <= path
        got = wrong_by_source(report)
        assert got["cfi"] == expected, name
        if name != "realigned":         # GNU as writes no SFrame for a DRAP frame
            assert got["sframe"] == planted_ranges(labelled, [e for e in errors if e not in SFRAME_CANNOT_SAY])
        for source in ("cfi", "sframe"):
            assert got.get(source, []) == [a for a in wrong(offline, source) if a in path]


def test_correct_twin_clean_bound_and_errors():
    _, bare = live_program(correct=True)
    reports = _validate_each_call(bare)
    assert all(r["complete"] and r["wrong"] == [] for r in reports)
    assert [r["sources"]["cfi"]["right"] for r in reports] == [6, 7, 7, 8, 5, 13]
    status, transcript = run_batch(bare, ["breakpoint set -n stop_here", "run",
                                          "unwind validate",
                                          "unwind validate -j -n 2 missing_adjust",
                                          "thread step-inst",       # into helper, at its entry
                                          "thread step-inst",       # at helper's ret
                                          "unwind validate"])
    outputs = [output for command, output in batch_outputs(transcript) if command == "unwind validate"]
    assert "validate stop_here" in outputs[0] and "cfi: 1/1 instructions right" in outputs[0]
    bounded = batch_json(transcript, "unwind validate -j -n 2 missing_adjust")
    assert (bounded["ending"], bounded["steps"], bounded["complete"]) == ("step-limit", 2, False)
    assert status == 1 and "not a function's first instruction" in transcript.split("thread step-inst")[-1]


def test_real_debian_program_libc_functions_are_right():
    """ls (Debian's binary) calling glibc's strcoll and fwrite_unlocked: every CFI row right, live.

    (Names ld.so has too, such as readdir64, would resolve to ld.so's copy, which ls never calls.)"""
    commands = ["breakpoint set -n opendir", "process launch -- %s" % FIXTURES]
    commands += ["unwind validate -j %s" % name for name in ("strcoll", "fwrite_unlocked")]
    status, transcript = run_batch(shutil.which("ls"), commands)
    assert status == 0, transcript[-3000:]
    for name in ("strcoll", "fwrite_unlocked"):
        report = batch_json(transcript, "unwind validate -j %s" % name)
        assert report["complete"] and report["instructions"] >= 10, name
        cfi = report["sources"]["cfi"]
        assert cfi["right"] == cfi["checked"] == report["instructions"] and report["wrong"] == [], name


def test_a_breakpoint_inside_the_call_ends_the_validation_and_says_so():
    _, bare = live_program(correct=True)
    status, transcript = run_batch(bare, ["breakpoint set -n stop_here", "run", "breakpoint set -n helper",
                                          "unwind validate -j missing_adjust"])
    report = batch_json(transcript, "unwind validate -j missing_adjust")
    assert (report["ending"], report["complete"]) == ("interrupted", False)
    assert "in helper" in report["inferior"] and report["wrong"] == []


def test_aarch64_under_qemu_planted_errors_found():
    """The aarch64 fixture under qemu-aarch64's gdbstub, LLDB's gdb-remote: the same instructions as offline."""
    labelled, bare = live_program(correct=False, aarch64=True)
    commands = ["breakpoint set -n stop_here", "continue"]
    commands += ["unwind validate -j %s" % name for name, _ in LIVE_CALLS_AARCH64]
    with qemu_user("qemu-aarch64", bare, (), options=("-cpu", "max,sve=off")) as address:
        status, transcript = run_batch(bare, ["gdb-remote %s" % address] + commands, timeout=300)
    assert status == 0, transcript[-3000:]
    reports = [_json(output) for command, output in batch_outputs(transcript)
               if command.startswith("unwind validate")]
    assert len(reports) == len(LIVE_CALLS_AARCH64)
    for (name, errors), report in zip(LIVE_CALLS_AARCH64, reports):
        assert report["complete"], (name, report["ending_detail"])
        assert wrong_by_source(report)["cfi"] == planted_ranges(labelled, errors, A64), name
