"""Corrupted stacks in GDB: every walk ends with the right named reason, fast.

The cases and why each reason is right are in tests/helpers/termination_cases.py.
Each GDB session stops the fixture at stop_here, walks with each source
list, then checks that GDB still works: GDB's own `bt` with the plugin's
fallback frames claimed (`set unwind fallback on`) and a plain command after
it. gdbrun asserts there is no Python traceback in the transcript, and the
session must finish within its time limit.
"""

import time

import pytest

from gdb_actions import DECLINES
from gdbrun import run_gdb
from support import build
from termination_cases import (CASES, CORRUPT_FLAGS, DEEP_FRAMES, DEEP_FULL, DEFAULT_SESSION_SECONDS,
                               SESSION_SECONDS, SOURCE_LISTS, summarize)

TIMED = ("(lambda start, text: {'text_tail': '\\n'.join(text.splitlines()[-3:]), 'text_frames': "
         "text.count('\\n#') + text.startswith('#'), 'seconds': __import__('time').monotonic() - start, "
         "'summary_text': text if len(text) < 200000 else text[:2000] + '\\n...\\n' + text[-2000:]})"
         "(__import__('time').monotonic(), gdb.execute(%r, to_string=True))")


def walk_action(name, sources):
    """A "py" action: run `unwind backtrace -sources ...` inside GDB, keep its tail and its duration."""
    return (name, "py", TIMED % ("unwind backtrace -sources %s" % sources))


def corrupt_binary():
    return build("corrupt.c", CORRUPT_FLAGS)


def after_actions():
    return [("fallback_on", "cmd", "set unwind fallback on"),
            ("gdb_bt", "cmd", "bt 25"),
            ("still_works", "cmd", "print 1+1")]


def check_debugger_still_works(results):
    assert "#0" in results["gdb_bt"] and "stop_here" in results["gdb_bt"]
    assert results["still_works"].strip() == "$1 = 2"


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupted_stack_ends_with_its_reason(case):
    args, expected = CASES[case]
    actions = [walk_action(sources, sources) for sources in SOURCE_LISTS] + after_actions()
    limit = SESSION_SECONDS.get(case, DEFAULT_SESSION_SECONDS)
    started = time.monotonic()
    results, transcript = run_gdb(corrupt_binary(), actions, args=args, timeout=limit)
    elapsed = time.monotonic() - started
    assert elapsed < limit
    for sources in SOURCE_LISTS:
        got = results[sources]
        assert "error" not in got, got
        summary = summarize(got["summary_text"])
        want_reason, want_last = expected[sources]
        assert (summary["reason"], summary["last_function"]) == (want_reason, want_last), (
            sources, got["text_tail"])
        print("%-14s %-24s %-26s last %-14s %6d frames %6.2fs" % (
            case, sources, summary["reason"], summary["last_function"], got["text_frames"], got["seconds"]))
    check_debugger_still_works(results)


def test_deep_recursion_walks_to_clone3_when_allowed():
    max_frames, expected = DEEP_FULL
    actions = [("max", "cmd", "set unwind max-frames %d" % max_frames)]
    actions += [walk_action(sources, sources) for sources in expected] + after_actions()
    results, _ = run_gdb(corrupt_binary(), actions, args=CASES["deep"][0], timeout=SESSION_SECONDS["deep"])
    for sources, (reason, last) in expected.items():
        got = results[sources]
        summary = summarize(got["summary_text"])
        assert summary["reason"] == reason and summary["last_function"] in last, got["text_tail"]
        assert got["text_frames"] == DEEP_FRAMES
        print("deep (full)    %-24s %-26s last %-14s %6d frames %6.2fs" % (
            sources, reason, summary["last_function"], got["text_frames"], got["seconds"]))
    check_debugger_still_works(results)


def test_unwinder_with_fallback_on_keeps_gdb_bt_sane_on_damage():
    """GDB's own bt with the fallback sources claimed: no hang, no traceback, a clean end."""
    binary = corrupt_binary()
    for mode in ("self-fp", "data-ra", "unmapped-fp", "misaligned-sp"):
        results, transcript = run_gdb(binary, [
            ("on", "cmd", "set unwind fallback on"),
            ("bt", "cmd", "bt"),
            ("declines", "py", DECLINES),
            ("again", "cmd", "print 1+1"),
        ], args=[mode], timeout=DEFAULT_SESSION_SECONDS)
        assert "stop_here" in results["bt"], (mode, transcript)
        assert not any("internal error" in d for d in results["declines"]), results["declines"]
        assert results["again"].strip() == "$1 = 2"
