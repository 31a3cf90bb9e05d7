"""Corrupted stacks in LLDB: every walk ends with the right named reason, fast.

The same cases, source lists and expected reasons as in GDB
(tests/helpers/termination_cases.py, which says why each reason is right), run
in the real lldb-16 through the scripted driver: one LLDB session per case
stops the fixture at stop_here, walks with each source list (`unwind
backtrace --sources LIST`, timed inside LLDB), then checks that LLDB still
works: its own `thread backtrace`, an expression, and another plugin walk.
The deep case also raises `unwind settings max-frames` in the same session
and walks all 100,005 frames to clone3.

Where the breakpoint goes: LLDB 16 does not skip the prologue of a
one-line function (stop_here's line-table rows all have the same line), so
`breakpoint set --name stop_here` stops at its first instruction, where GDB
stops after `push rbp; mov rbp, rsp`. The frame-pointer source answers
differently there (the return address is still at [rsp], so the misaligned
case would walk on instead of refusing the misaligned rbp). To check the same
thing as GDB, the breakpoint is put where GDB puts it: at the first
line-table row after the function's entry (read from the binary's DWARF).

Bounded time: each session runs under a timeout (SESSION_SECONDS) and its
elapsed time is asserted; each walk's time is measured inside LLDB and
printed (pytest -s). No transcript may contain a Python traceback, including
the full text of every walk (which is too long to keep for the deep case,
so the driver keeps its head and tail and checks the rest there).
"""

import time

import pytest

from lldbrun import run_lldb
from support import build
from termination_cases import (CASES, CORRUPT_FLAGS, DEEP_FRAMES, DEEP_FULL, DEFAULT_SESSION_SECONDS,
                               SESSION_SECONDS, SOURCE_LISTS, summarize)

# Defined inside the driver (tests/helpers/lldb_driver.py evaluates "py" actions in its
# own globals): run an LLDB command, time it, keep a summary of its output.
HELPERS = r'''
import time as _time

def timed(line):
    result = lldb.SBCommandReturnObject()
    start = _time.monotonic()
    debugger.GetCommandInterpreter().HandleCommand(line, result)
    seconds = _time.monotonic() - start
    text, error = result.GetOutput() or "", result.GetError() or ""
    lines = text.splitlines()
    head, tail = lines[:5], lines[max(5, len(lines) - 20):]
    skipped = len(lines) - len(head) - len(tail)
    transcript.append("(lldb) %s\n%s\n%s%s\n%s" % (line, "\n".join(head),
                      "[... %d lines ...]\n" % skipped if skipped else "", "\n".join(tail), error))
    return {"ok": result.Succeeded(), "error": error, "seconds": seconds,
            "frames": sum(1 for l in lines if l.startswith("#")), "tail": "\n".join(lines[-20:]),
            "traceback": "Traceback" in text or "Traceback" in error}
'''
DEFINE = ("define", "py", "exec(%r, globals())" % HELPERS)


def walk(name, line):
    return (name, "py", "timed(%r)" % line)


def corrupt_binary():
    return build("corrupt.c", CORRUPT_FLAGS)


def after_prologue(binary, function):
    """The address GDB breaks at for `break FUNCTION`: the first line-table row after its entry.

    Returns (entry, that address), both file addresses.
    """
    from elftools.elf.elffile import ELFFile
    with open(binary, "rb") as handle:
        elf = ELFFile(handle)
        symbol = elf.get_section_by_name(".symtab").get_symbol_by_name(function)[0]
        start, end = symbol["st_value"], symbol["st_value"] + symbol["st_size"]
        dwarf = elf.get_dwarf_info()
        rows = []
        for unit in dwarf.iter_CUs():
            program = dwarf.line_program_for_CU(unit)
            for entry in program.get_entries() if program else ():
                state = entry.state
                if state is not None and state.is_stmt and not state.end_sequence and start < state.address < end:
                    rows.append(state.address)
    assert rows, "%s: no line-table row inside %s after its entry" % (binary, function)
    return start, min(rows)


def breakpoint_like_gdb(binary, function="stop_here"):
    entry, address = after_prologue(binary, function)
    return "breakpoint set --name %s --skip-prologue false --address-slide %d" % (function, address - entry)


def after_actions():
    return [("lldb_bt", "cmd", "thread backtrace -c 25"),
            ("expression", "cmd", "expression -- 1+1"),
            ("again", "json", "unwind backtrace --json -c 2")]


def check_lldb_still_works(results):
    assert results["lldb_bt"]["ok"] and "frame #0" in results["lldb_bt"]["output"], results["lldb_bt"]
    assert "stop_here" in results["lldb_bt"]["output"]
    assert results["expression"]["ok"] and results["expression"]["output"].strip().endswith("= 2"), \
        results["expression"]
    assert [f["function"] for f in results["again"]["frames"]][:1] == ["stop_here"], results["again"]


def check_walk(got, want_reason, want_last, label):
    assert got["ok"] and not got["error"], (label, got)
    assert not got["traceback"], (label, got)
    summary = summarize(got["tail"])
    last_ok = summary["last_function"] in want_last if isinstance(want_last, tuple) \
        else summary["last_function"] == want_last
    assert summary["reason"] == want_reason and last_ok, (label, got["tail"])
    return summary


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupted_stack_ends_with_its_reason_in_lldb(case):
    args, expected = CASES[case]
    binary = corrupt_binary()
    actions = [DEFINE] + [walk(sources, "unwind backtrace --sources %s" % sources) for sources in SOURCE_LISTS]
    if case == "deep":
        # The same session, with room for every frame (GDB: `set unwind max-frames`).
        max_frames, full = DEEP_FULL
        actions.append(("max", "cmd", "unwind settings max-frames %d" % max_frames))
        actions += [walk("full " + sources, "unwind backtrace --sources %s" % sources) for sources in full]
        actions.append(("max_back", "cmd", "unwind settings max-frames 20000"))
    actions += after_actions()
    limit = SESSION_SECONDS.get(case, DEFAULT_SESSION_SECONDS)
    started = time.monotonic()
    results, _ = run_lldb(binary, actions, args=args, breakpoint=None, setup=[breakpoint_like_gdb(binary)],
                          timeout=limit)
    elapsed = time.monotonic() - started
    assert elapsed < limit
    for sources in SOURCE_LISTS:
        got = results[sources]
        want_reason, want_last = expected[sources]
        summary = check_walk(got, want_reason, want_last, sources)
        print("lldb %-14s %-24s %-26s last %-14s %6d frames %6.2fs" % (
            case, sources, summary["reason"], summary["last_function"], got["frames"], got["seconds"]))
    if case == "deep":
        assert results["max"]["ok"] and "200000" in results["max"]["output"], results["max"]
        for sources, (reason, last) in DEEP_FULL[1].items():
            got = results["full " + sources]
            summary = check_walk(got, reason, last, "full " + sources)
            assert got["frames"] == DEEP_FRAMES, got["tail"]
            print("lldb deep (full) %-24s %-26s last %-14s %6d frames %6.2fs" % (
                sources, reason, summary["last_function"], got["frames"], got["seconds"]))
        assert results["max_back"]["ok"]
    print("lldb %-14s session %.2fs" % (case, elapsed))
    check_lldb_still_works(results)
