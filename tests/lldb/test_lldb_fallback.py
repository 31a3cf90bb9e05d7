"""The frame-pointer and scan sources inside the real LLDB 16, and `unwind settings`.

Oracle: LLDB's own unwinder on the same binaries. The fixtures are the ones
GDB's test uses (tests/gdb/test_fallback_gdb.py): chain.c built -O0 and -O2
-fomit-frame-pointer, then stripped of .eh_frame and .eh_frame_hdr, so the
program's own frames have no tables (libc keeps its own). LLDB falls back on
its own heuristics there (assembly profiling of each function's prologue),
and it does well: it finds every frame. With only `frame-pointer` and
`scan`, the plugin must recover at least every real frame LLDB recovers, at
the same stack pointer and in the same order, and say how, by the same rule
as in GDB (expected_method).

Real frames, as GDB's test counts them: those with a function name. And
one more rule for LLDB: it goes on past `_start` (and would past a
thread's clone3), repeating `_start` with sp 8 bytes higher; nothing called
`_start`, so that is not a frame. The test checks that whatever LLDB lists
past the first outermost function is only such a repeat, then drops it.

Breakpoints here are LLDB's own (`breakpoint set --name stop_here`): for the
-O0 build that is stop_here's first instruction (LLDB does not skip the
prologue of a one-line function), so the frame-pointer source reads level 1's
return address at [rsp] rather than through rbp. expected_method gives
frame-pointer for level 1 either way.

Then the JIT fixture (code in an anonymous mapping, no module), and the
settings: `unwind settings`, `unwind settings sources|max-frames|scan-words`.
"""

import pytest

from fallback_scenarios import (BUILDS, JIT_BUILDS, OUTERMOST_FUNCTIONS, SCENARIOS, describe, expected_method,
                                is_subsequence, jit_frame, stripped)
from lldbrun import batch_outputs, physical, run_batch, run_lldb, version
from support import build

FALLBACKS = "frame-pointer,scan"
OUTERMOST_NAMED = tuple(name for name in OUTERMOST_FUNCTIONS if name)


def lldb_real_frames(frames):
    """LLDB's physical frames with a function name, up to the first outermost function.

    Asserts that what LLDB lists after that function only repeats it.
    """
    named = [f for f in physical(frames) if f["function"]]
    for i, frame in enumerate(named):
        if frame["function"] in OUTERMOST_NAMED:
            beyond = named[i + 1:]
            assert all(f["pc"] == frame["pc"] for f in beyond), (
                "LLDB has frames past %s: %s" % (frame["function"], describe(beyond)))
            return named[:i + 1]
    return named


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_fallbacks_recover_every_frame_lldb_recovers_on_a_stripped_binary(scenario, flags_name):
    binary = stripped(flags_name)
    results, transcript = run_lldb(binary, [
        ("ours", "json", "unwind explain --json --sources %s all" % FALLBACKS),
        ("frames", "frames", None),
        ("tables", "json", "unwind modules --json"),
    ], args=SCENARIOS[scenario])
    # The program's own module really has no CFI now (libc keeps its own): objcopy
    # leaves PT_GNU_EH_FRAME behind, empty.
    tables = next(m for m in results["tables"]["modules"] if m["name"] == binary.name)["tables"]
    assert ".eh_frame" not in tables and tables.get(".eh_frame_hdr", {"size": 0})["size"] == 0, tables
    frames = results["ours"]["frames"]
    native = lldb_real_frames(results["frames"])
    assert len(native) >= 2, transcript
    # Every real frame of LLDB's is one of ours: same pc, same sp, same order.
    ours_keys = [(f["pc"], f["sp"]) for f in frames]
    missing = [f for f in native if (f["pc"], f["sp"]) not in ours_keys]
    assert not missing, "LLDB has frames the plugin lacks: %s\nplugin: %s" % (describe(missing), describe(frames))
    assert is_subsequence([(f["pc"], f["sp"]) for f in native], ours_keys)
    # Every frame of ours is code in a module, and our own functions are named.
    assert all(f["module"] for f in frames), describe(frames)
    assert all(f["function"] for f in frames if f["module"].startswith("chain-noeh")), describe(frames)
    assert frames[0]["method"] == "context"
    methods = [(f["function"], f["method"]) for f in frames]
    for level in range(1, len(frames)):
        assert frames[level]["method"] == expected_method(frames, level, flags_name), (level, methods)
    assert results["ours"]["stop_reason"] == "outermost", results["ours"]["stop_detail"]
    assert frames[-1]["function"] in OUTERMOST_FUNCTIONS, describe(frames)
    # `unwind explain` holds LLDB's verdict on each frame: it agrees everywhere.
    assert all(f["native"]["agrees"] for f in frames), [(f["level"], f["native"]) for f in frames]
    print("lldb %-8s %-8s LLDB %2d real frames, plugin %2d (%s)" % (
        flags_name, scenario, len(native), len(frames),
        ", ".join("%s %d" % (m, sum(1 for f in frames if f["method"] == m))
                  for m in ("context", "frame-pointer", "scan"))))


# -- code with no module ------------------------------------------------------------

# LLDB's own view of the memory region holding each of its frames that is in no module.
_REGIONS = ("[(f.GetPC(), (lambda info: (process.GetMemoryRegionInfo(f.GetPC(), info), "
            "[info.GetRegionBase(), info.GetRegionEnd(), info.IsExecutable(), info.GetName()])[1])"
            "(lldb.SBMemoryRegionInfo())) for f in thread if not f.GetModule().IsValid()]")


@pytest.mark.parametrize("flags_name", sorted(JIT_BUILDS))
def test_jit_code_in_an_anonymous_mapping(flags_name):
    binary = build("jit.c", JIT_BUILDS[flags_name])
    results, transcript = run_lldb(binary, [
        ("ours", "json", "unwind backtrace --json"),
        ("fallbacks", "json", "unwind backtrace --json --sources %s" % FALLBACKS),
        ("compare", "json", "unwind compare --json"),
        ("compare_fallbacks", "json", "unwind compare --json --sources %s" % FALLBACKS),
        ("regions", "py", _REGIONS),
        ("text", "cmd", "unwind backtrace"),
    ])
    # LLDB's own unwinder sees exactly one frame outside every module: the JIT code,
    # in an executable anonymous region.
    assert len(results["regions"]) == 1, results["regions"]
    jit_pc, (start, end, executable, region_name) = results["regions"][0]
    assert executable and not region_name and start <= jit_pc < end, results["regions"]
    for walk in ("ours", "fallbacks"):
        frames = results[walk]["frames"]
        names = [f["function"] for f in frames]
        index, jit = jit_frame(frames)
        assert names[:index] == ["stop_here", "from_jit"][:index], names
        assert jit["pc"] == jit_pc and jit["module"] is None
        assert jit["function"] == "<jit code in anonymous mapping 0x%x>" % start
        # The JIT code has no tables: its caller is found by reading its code from the prologue
        # before the pc (by default), or through its frame record (the fallbacks alone).
        assert names[index + 1:index + 3] == ["run_jit", "main"], names
        assert frames[index + 1]["method"] == ("analysis" if walk == "ours" else "frame-pointer"), \
            describe(frames)
        assert results[walk]["stop_reason"] == "outermost", results[walk]["stop_detail"]
    # And LLDB's own unwinder agrees with every frame, through the JIT frame.
    for walk in ("compare", "compare_fallbacks"):
        assert results[walk]["agree"], results[walk]["summary"]
    assert "<jit code in anonymous mapping 0x%x>" % start in results["text"]["output"]


# -- settings --------------------------------------------------------------------------

def _error_line(out, name="unwind settings"):
    """A failed command: one LLDB error line naming the command, no output."""
    assert not out["ok"], out
    assert out["error"].startswith("error: %s: " % name) and out["error"].count("\n") == 1, out["error"]
    assert out["output"] == ""
    return out["error"]


def test_settings_change_every_walk_and_last_the_session():
    binary = stripped("O2-nofp")
    other = build("jit.c", JIT_BUILDS["O0"])
    results, _ = run_lldb(binary, [
        ("show", "cmd", "unwind settings"),
        ("show_json", "json", "unwind settings --json"),
        ("default", "json", "unwind backtrace --json"),
        ("set_sources", "cmd", "unwind settings sources scan"),
        ("scan_only", "json", "unwind backtrace --json"),
        ("explain_scan", "json", "unwind explain --json all"),
        ("override", "json", "unwind backtrace --json --sources frame-pointer,scan"),
        ("bad_sources", "cmd", "unwind settings sources cfi,stack"),
        ("no_sources", "cmd", "unwind settings sources ,"),
        ("still", "cmd", "unwind settings sources"),
        ("spaced", "cmd", "unwind settings sources frame-pointer, scan"),
        ("narrow", "cmd", "unwind settings scan-words 2"),
        ("narrowed", "json", "unwind backtrace --json"),
        ("bad_words", "cmd", "unwind settings scan-words 0"),
        ("too_many_words", "cmd", "unwind settings scan-words 1048577"),
        ("words_now", "cmd", "unwind settings scan-words"),
        ("wide", "cmd", "unwind settings scan-words 0x400"),
        ("few", "cmd", "unwind settings max-frames 3"),
        ("limited", "json", "unwind backtrace --json"),
        ("limited_compare", "json", "unwind compare --json"),
        ("bad_frames", "cmd", "unwind settings max-frames abc"),
        ("two_values", "cmd", "unwind settings max-frames 3 4"),
        ("unknown", "cmd", "unwind settings stack-words 5"),
        ("bad_option", "cmd", "unwind settings --bogus"),
        ("after", "json", "unwind settings --json"),
        # The settings belong to the debugger: a re-run and another target keep them.
        ("kill", "cmd", "process kill"),
        ("relaunch", "cmd", "process launch -- plain"),
        ("rerun", "json", "unwind backtrace --json"),
        ("other_target", "cmd", "target create %s" % other),
        ("other_settings", "json", "unwind settings --json"),
        ("help", "cmd", "help unwind settings"),
        ("help_unwind", "cmd", "help unwind"),
    ], args=["plain"])
    show = results["show"]["output"]
    assert results["show"]["ok"], results["show"]
    lines = show.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["sources", "max-frames", "scan-words", "guesses"], show
    assert "max-frames (unsigned) = 20000" in show and "scan-words (unsigned) = 1024" in show
    default = results["show_json"]
    assert default == {"sources": ["cfi", "sframe", "compact", "exidx", "pdata", "orc", "analysis", "frame-pointer", "scan"],
                       "max_frames": 20000, "scan_words": 1024, "claim_guesses": False}
    assert {f["method"] for f in results["default"]["frames"][1:]} <= {"cfi", "analysis", "frame-pointer", "scan"}
    # `unwind settings sources scan`: every walk uses the scanner alone, explain too...
    assert "sources (list) = scan" in results["set_sources"]["output"]
    assert "off: cfi, sframe, compact, exidx, pdata, orc, analysis, frame-pointer" \
        in results["set_sources"]["output"]
    assert {f["method"] for f in results["scan_only"]["frames"][1:]} == {"scan"}
    assert {f["method"] for f in results["explain_scan"]["frames"][1:]} == {"scan"}
    assert all(a["source"] == "scan" for f in results["explain_scan"]["frames"] for a in f["attempts"])
    # ...unless a command's --sources says otherwise, for that walk only.
    assert results["override"]["frames"][1]["method"] == "frame-pointer"
    assert "unknown source 'stack'" in _error_line(results["bad_sources"])
    assert "no sources given" in _error_line(results["no_sources"])
    assert results["still"]["output"].startswith("sources (list) = scan "), results["still"]
    assert results["spaced"]["output"].startswith("sources (list) = frame-pointer,scan "), results["spaced"]
    # scan-words: the window the scanner reads.
    narrowed = results["narrowed"]
    assert narrowed["stop_reason"] == "no-unwind-info", narrowed["stop_detail"]
    assert "in the 2 words" in narrowed["stop_detail"]
    assert "from 1 to 1048576" in _error_line(results["bad_words"])
    assert "not '1048577'" in _error_line(results["too_many_words"])
    assert results["words_now"]["output"].strip() == "scan-words (unsigned) = 2"
    assert results["wide"]["output"].strip() == "scan-words (unsigned) = 1024"
    # max-frames: a walk stops with depth-limit, compare and explain walk no further.
    limited = results["limited"]
    assert len(limited["frames"]) == 3 and limited["stop_reason"] == "depth-limit", limited["stop_detail"]
    assert len(results["limited_compare"]["frames"]) >= 3
    assert results["limited_compare"]["stop_reason"] == "depth-limit"
    assert "at least 1" in _error_line(results["bad_frames"])
    assert "takes one value" in _error_line(results["two_values"])
    assert "unknown setting 'stack-words'; the settings are: sources, max-frames, scan-words, guesses" \
        in _error_line(results["unknown"])
    if version() >= 19:     # parsed commands: LLDB reads the options, and says so its own way
        assert results["bad_option"]["error"] == "error: unknown or ambiguous option\n", results["bad_option"]
    else:
        assert "unrecognized arguments: --bogus" in _error_line(results["bad_option"])
    after = {"sources": ["frame-pointer", "scan"], "max_frames": 3, "scan_words": 1024, "claim_guesses": False}
    assert results["after"] == after            # errors changed nothing
    assert results["relaunch"]["ok"], results["relaunch"]
    rerun = results["rerun"]
    assert len(rerun["frames"]) == 3 and rerun["stop_reason"] == "depth-limit"
    assert [f["method"] for f in rerun["frames"]] == ["context", "frame-pointer", "scan"]
    assert results["other_target"]["ok"] and results["other_settings"] == after
    help_text = results["help"]["output"]
    syntax = "Syntax: settings <cmd-options> [<name | value>]" if version() >= 19 else \
        "Usage: unwind settings [--json] [NAME [VALUE]]"
    for words in (syntax, "sources LIST", "max-frames N", "scan-words N", "guesses on|off", "--sources option of a command overrides"):
        assert words in help_text, help_text
    assert "settings  -- Show or change the plugin's settings" in results["help_unwind"]["output"]


def test_settings_without_a_target_in_batch_mode():
    """`lldb-16 --batch` with no program: the settings need no target; an error ends the batch."""
    status, transcript = run_batch(None, [
        "unwind settings",
        "unwind settings max-frames 7",
        "unwind settings sources cfi , frame-pointer",
        "unwind settings",
        "unwind settings scan-words -- -1",     # `--` before a word that starts with "-": every version
    ])
    assert status == 1, transcript
    outputs = batch_outputs(transcript)
    assert outputs[1][0] == "unwind settings" and "max-frames (unsigned) = 20000" in outputs[1][1], outputs
    assert outputs[4][1].strip().splitlines() == [
        "sources (list) = cfi,frame-pointer   (off: sframe, compact, exidx, pdata, orc, analysis, scan)",
        "max-frames (unsigned) = 7",
        "scan-words (unsigned) = 1024",
        "guesses (boolean) = off"], outputs[4]
    last = transcript.rstrip().splitlines()[-1]
    assert last == "error: unwind settings: scan-words must be a whole number from 1 to 1048576, not '-1'", \
        transcript[-500:]
