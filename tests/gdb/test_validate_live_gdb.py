"""`unwind validate` in GDB: one real call of each planted function, stepped, checked against its entry.

The oracle for where each error lies is the assembler's symbols (bad_N_begin
and bad_N_end, read with nm from the same program before its local symbols
were discarded) and objdump's instruction list; the instructions a call
went through are the ones GDB stopped at (the report's path). Every planted
error on that path must be reported at exactly its instructions, by every
source that can express it; the correct twin must be clean; and the live
mode must agree with the offline one wherever the offline one is sure.
"""

import shutil

import pytest

from gdbrun import run_gdb
from qemu_user import qemu_user
from support import FIXTURES
from validate_support import (A64, LIVE_CALLS, LIVE_CALLS_AARCH64, SFRAME_CANNOT_SAY, live_program,
                              planted_ranges, validate, wrong, wrong_by_source)


def _validate_each_call(program, options=""):
    actions = [("call%d" % i, "json", "unwind validate -json %s%s" % (options, name))
               for i, (name, _) in enumerate(LIVE_CALLS)]
    results, transcript = run_gdb(program, actions)
    for key, value in results.items():
        assert "error" not in value, (key, value)
    return [results["call%d" % i] for i in range(len(LIVE_CALLS))], transcript


@pytest.fixture(scope="module")
def planted():
    labelled, bare = live_program(correct=False)
    reports, _ = _validate_each_call(bare)
    return labelled, reports


def test_every_planted_error_on_the_path_is_found_at_its_exact_instructions(planted):
    labelled, reports = planted
    for (name, errors), report in zip(LIVE_CALLS, reports):
        assert report["complete"] and report["ending"] == "returned", report
        path = set(report["path"])
        expected = [a for a in planted_ranges(labelled, errors) if a in path]
        assert len(expected) == len(planted_ranges(labelled, errors)), "the call skipped part of a planted error"
        got = wrong_by_source(report)
        assert got["cfi"] == expected, name
        sframe = [a for a in planted_ranges(labelled, [e for e in errors if e not in SFRAME_CANNOT_SAY]) if a in path]
        if name != "realigned":         # GNU as writes no SFrame for a DRAP frame
            assert got["sframe"] == sframe, name


def test_each_wrong_instruction_names_the_row_and_both_values(planted):
    _, reports = planted
    after_leave = reports[1]
    [cfi] = [w for w in after_leave["wrong"] if w["source"] == "cfi"]
    assert cfi["instruction"] == "ret" and cfi["row"].startswith("CFA=rsp+16")
    items = {i["item"]: i for i in cfi["items"]}
    assert items["cfa"]["true"] == after_leave["cfa"] and items["cfa"]["predicted"] == after_leave["cfa"] + 8
    assert items["return address"]["true"] == after_leave["return_address"]
    saves = [w for w in reports[2]["wrong"] if w["source"] == "cfi"]
    assert len(saves) == 6 and all([i["item"] for i in w["items"]] == ["rbx"] for w in saves)
    assert all("rbx=[CFA-24]" in w["row"] for w in saves)


def test_live_and_offline_agree_where_the_offline_mode_is_sure(planted):
    labelled, reports = planted
    offline = validate(labelled)
    for report in reports:
        path = set(report["path"])
        for source in ("cfi", "sframe"):
            assert wrong_by_source(report)[source] == [a for a in wrong(offline, source) if a in path]


def test_the_correct_twin_is_right_at_every_instruction():
    _, bare = live_program(correct=True)
    reports, _ = _validate_each_call(bare)
    for report in reports:
        assert report["complete"] and report["wrong"] == []
        assert report["sources"]["cfi"]["right"] == report["instructions"]
        assert report["sources"]["cfi"]["unknown"] == []
    assert sum(r["instructions"] for r in reports) == 6 + 7 + 7 + 8 + 5 + 13


def test_text_summary_bound_and_errors():
    _, bare = live_program(correct=False)
    results, _ = run_gdb(bare, [
        ("here", "cmd", "unwind validate"),                       # stopped at stop_here's entry
        ("bounded", "json", "unwind validate -json -steps 2 missing_adjust"),
        ("text", "cmd", "unwind validate wrong_after_leave"),
        ("inside", "cmd", "stepi"),
        ("not_entry", "cmd", "unwind validate"),
        ("bad", "cmd", "unwind validate no_such_function"),
    ])
    assert "stop_here" in results["here"] and "cfi: 1/1 instructions right" in results["here"]
    bounded = results["bounded"]
    assert (bounded["ending"], bounded["steps"], bounded["complete"]) == ("step-limit", 2, False)
    assert "ran part of the function" in bounded["inferior"]
    text = results["text"]
    assert "cfi: 6/7 instructions right, wrong at +0x12" in text
    assert "sframe: 6/7 instructions right, wrong at +0x12" in text
    assert "it is now stopped at" in text and "in main" in text
    assert "not a function's first instruction" in results["not_entry"]["error"]
    assert "cannot evaluate 'no_such_function'" in results["bad"]["error"]


def test_real_debian_program_libc_functions_are_right():
    """ls (Debian's binary) calling glibc's readdir64, closedir and malloc: every CFI row right, live."""
    results, _ = run_gdb(shutil.which("ls"), [
        (name, "json", "unwind validate -json %s" % name) for name in ("readdir64", "closedir", "malloc")],
        args=[str(FIXTURES)], breakpoint="opendir")
    for name in ("readdir64", "closedir", "malloc"):
        report = results[name]
        assert "error" not in report, report
        assert report["complete"] and report["instructions"] >= 10, name
        cfi = report["sources"]["cfi"]
        assert cfi["right"] == cfi["checked"] == report["instructions"] and report["wrong"] == [], name


def test_aarch64_under_qemu_planted_errors_found_and_twin_clean():
    """The aarch64 fixture (stp/ldp with writeback, str of x19) stepped under qemu-aarch64 with gdb-multiarch."""
    for correct in (False, True):
        labelled, bare = live_program(correct, aarch64=True)
        actions = [("call%d" % i, "json", "unwind validate -json %s" % name)
                   for i, (name, _) in enumerate(LIVE_CALLS_AARCH64)]
        with qemu_user("qemu-aarch64", bare, (), options=("-cpu", "max,sve=off")) as address:
            results, _ = run_gdb(bare, actions, gdb_program="gdb-multiarch", remote=address, timeout=300)
        for i, (name, errors) in enumerate(LIVE_CALLS_AARCH64):
            report = results["call%d" % i]
            assert "error" not in report, report
            assert report["complete"], (name, report["ending_detail"])
            got = wrong_by_source(report)
            expected = [] if correct else planted_ranges(labelled, errors, A64)
            assert set(expected) <= set(report["path"])
            assert got["cfi"] == expected, name
            sframe = [] if correct else planted_ranges(labelled, [e for e in errors if e not in SFRAME_CANNOT_SAY], A64)
            assert got["sframe"] == sframe, name


def test_a_breakpoint_inside_the_call_ends_the_validation_and_says_so():
    """Stepping over `call helper` stops at the user's breakpoint in helper: validate says where it is left."""
    _, bare = live_program(correct=True)
    results, _ = run_gdb(bare, [("break", "cmd", "break helper"),
                                ("run", "json", "unwind validate -json missing_adjust"),
                                ("where", "py", "gdb.newest_frame().name()")])
    report = results["run"]
    assert (report["ending"], report["complete"]) == ("interrupted", False)
    assert "breakpoint" in report["ending_detail"] and "in helper" in report["inferior"]
    assert results["where"] == "helper"
    assert report["wrong"] == [] and report["sources"]["cfi"]["right"] == 3     # push, mov, call: all checked
