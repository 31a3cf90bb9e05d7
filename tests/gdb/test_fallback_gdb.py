"""The frame-pointer and scan sources inside the real GDB.

Oracle: GDB's own unwinder (the plugin's disabled) on the same binaries.
Fixtures are built with -O0 and with -O2 -fomit-frame-pointer, then their
.eh_frame and .eh_frame_hdr are removed, so the program's own frames have no
tables at all (libc keeps its own). With only `frame-pointer` and `scan`
the plugin must recover at least every frame GDB recovers there, in the same
order, and say how: frame-pointer where a frame record was followed, scan
where the stack was searched.

Then the JIT fixture (code in an anonymous mapping), and the settings:
`set unwind sources`, `set unwind fallback`, `set unwind scan-words`.
"""

import pytest

from fallback_scenarios import (BUILDS, JIT_BUILDS, OUTERMOST_FUNCTIONS, SCENARIOS, expected_method, is_subsequence,
                                jit_frame, stripped)
from gdb_actions import claimed, native_frames
from gdbrun import run_gdb
from support import build

FALLBACKS = "unwind backtrace -json -sources frame-pointer,scan"
FALLBACKS_EXPLAINED = "unwind explain -json -sources frame-pointer,scan all"
NATIVE_SETUP = ["set backtrace past-main on", "set backtrace past-entry on"]


@pytest.mark.parametrize("flags_name", sorted(BUILDS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_fallbacks_recover_every_frame_gdb_recovers_on_a_stripped_binary(scenario, flags_name):
    binary = stripped(flags_name)
    results, transcript = run_gdb(binary, [
        ("ours", "json", FALLBACKS_EXPLAINED),
        *native_frames(),
    ], args=SCENARIOS[scenario], setup=NATIVE_SETUP)
    ours = results["ours"]
    frames = ours["frames"]
    our_pcs = [f["pc"] for f in frames]
    # GDB's frames that are real functions (stripped of CFI, GDB's heuristics
    # sometimes add frames at stack addresses or small integers: "??").
    native = [f for f in results["native"] if f["name"]]
    assert len(native) >= 2, transcript
    missing = [hex(f["pc"]) + " " + f["name"] for f in native if f["pc"] not in our_pcs]
    assert not missing, "GDB has frames the plugin lacks: %s\nplugin: %s" % (missing, [
        (hex(f["pc"]), f["function"], f["method"]) for f in frames])
    assert is_subsequence([f["pc"] for f in native], our_pcs)
    # Every frame of ours is code in a module, not a guess at a stack
    # address; our own functions are named (libc's internal ones are only
    # named where its debug symbols are installed).
    assert all(f["module"] for f in frames), [(hex(f["pc"]), f["function"]) for f in frames]
    assert all(f["function"] for f in frames if f["module"].startswith("chain-noeh")), methods_of(frames)
    assert frames[0]["method"] == "context"
    methods = [(f["function"], f["method"]) for f in frames]
    for level in range(1, len(frames)):
        assert frames[level]["method"] == expected_method(frames, level, flags_name), (level, methods)
    assert ours["stop_reason"] == "outermost", ours["stop_detail"]
    assert frames[-1]["function"] in OUTERMOST_FUNCTIONS, methods_of(frames)


def methods_of(frames):
    return [(hex(f["pc"]), f["function"], f["method"]) for f in frames]


def test_trust_and_found_by_are_reported():
    results, _ = run_gdb(stripped("O0"), [
        ("ours", "json", FALLBACKS),
        ("text", "cmd", "unwind backtrace -sources frame-pointer,scan"),
        ("explain", "json", "unwind explain -json -sources frame-pointer,scan 1"),
    ], args=["plain"])
    frames = results["ours"]["frames"]
    by_method = {f["method"]: f for f in frames}
    assert by_method["frame-pointer"]["trust"] == "frame pointer"
    assert by_method["frame-pointer"]["found_by"] == "frame pointer (rbp chain)"
    assert by_method["scan"]["trust"] == "stack scanning"
    assert by_method["scan"]["found_by"].startswith("stack scan: return address at [rsp+0x")
    assert "[found by: frame pointer (rbp chain)]" in results["text"]
    evidence = results["explain"]["frames"][0]["evidence"]
    assert evidence["row"] == "CFA=rbp+16 => rbp=[CFA-16] rip=[CFA-8]"
    assert [r["what"] for r in evidence["reads"]] == ["rbp", "rip"]
    attempts = results["explain"]["frames"][0]["attempts"]
    assert attempts == []           # frame-pointer is first in this walk


# -- code with no module ------------------------------------------------------------

@pytest.mark.parametrize("flags_name", sorted(JIT_BUILDS))
def test_jit_code_in_an_anonymous_mapping(flags_name):
    binary = build("jit.c", JIT_BUILDS[flags_name])
    results, transcript = run_gdb(binary, [
        ("ours", "json", "unwind backtrace -json"),
        ("fallbacks", "json", FALLBACKS),
        ("maps", "py", "[[m.start, m.end, m.executable, m.name] for m in "
                       "gdb._unwind_plugin_state.target.mappings()]"),
        ("native_bt", "cmd", "bt"),
        ("on", "cmd", "set unwind fallback on"),
        claimed("claimed_before"),
        ("fallback_bt", "cmd", "bt"),
        claimed("claimed_after"),
        ("with_fallback", "frames", None),
    ])
    for walk in ("ours", "fallbacks"):
        frames = results[walk]["frames"]
        names = [f["function"] for f in frames]
        index, jit = jit_frame(frames)
        assert names[:index] == ["stop_here", "from_jit"][:index]
        assert jit["module"] is None
        mapping = [m for m in results["maps"] if m[0] <= jit["pc"] < m[1]]
        assert mapping and mapping[0][2] and mapping[0][3] == ""      # executable, anonymous
        assert jit["function"] == "<jit code in anonymous mapping 0x%x>" % mapping[0][0]
        # The JIT code has no tables: its caller is found by reading its code from the prologue
        # before the pc (by default), or through its frame record (fallbacks only).
        assert names[index + 1:index + 3] == ["run_jit", "main"], names
        assert frames[index + 1]["method"] == ("analysis" if walk == "ours" else "frame-pointer")
        assert results[walk]["stop_reason"] == "outermost"
    # With the fallback sources claimed, GDB's own bt goes through the JIT frame too.
    assert results["claimed_after"] > results["claimed_before"]
    assert "run_jit" in results["fallback_bt"] and "main" in results["fallback_bt"], results["fallback_bt"]
    pcs = [f["pc"] for f in results["with_fallback"]]
    assert is_subsequence([f["pc"] for f in results["ours"]["frames"][:4]], pcs), transcript


# -- settings --------------------------------------------------------------------------

def test_sources_fallback_and_scan_window_settings():
    results, _ = run_gdb(stripped("O2-nofp"), [
        ("show_sources", "cmd", "show unwind sources"),
        ("show_fallback", "cmd", "show unwind fallback"),
        ("show_words", "cmd", "show unwind scan-words"),
        ("default", "json", "unwind backtrace -json"),
        ("set_sources", "cmd", "set unwind sources scan"),
        ("scan_only", "json", "unwind backtrace -json"),
        ("bad_sources", "cmd", "set unwind sources cfi,stack"),
        ("still", "cmd", "show unwind sources"),
        ("narrow", "cmd", "set unwind scan-words 2"),
        ("narrowed", "json", "unwind backtrace -json"),
        ("bad_words", "cmd", "set unwind scan-words 0"),
        ("words_now", "cmd", "show unwind scan-words"),
        ("wide", "cmd", "set unwind scan-words 1024"),
        ("bt_off", "frames", None),
        claimed("claimed_off"),
        ("fallback_on", "cmd", "set unwind fallback on"),
        ("bt_on", "frames", None),
        claimed("claimed_on"),
    ], args=["plain"], setup=NATIVE_SETUP)
    sources = results["show_sources"]
    assert sources.index("cfi") < sources.index("frame-pointer") < sources.index("scan")
    assert "does not use" in results["show_fallback"]
    assert "1024" in results["show_words"]
    assert {f["method"] for f in results["default"]["frames"][1:]} <= {"cfi", "analysis", "frame-pointer", "scan"}
    assert {f["method"] for f in results["scan_only"]["frames"][1:]} == {"scan"}
    assert "error" in results["bad_sources"] and "unknown source 'stack'" in results["bad_sources"]["error"]
    assert "scan" in results["still"] and "stack" not in results["still"]
    narrowed = results["narrowed"]
    assert narrowed["stop_reason"] == "no-unwind-info"
    assert "in the 2 words" in narrowed["stop_detail"]
    assert "error" in results["bad_words"] and "2" in results["words_now"]
    # GDB's bt: fallback frames are claimed only once `set unwind fallback on`.
    off, on = results["bt_off"], results["bt_on"]
    assert any(f["name"] is None for f in off)          # GDB's own heuristics guess "??" frames here
    names = [f["name"] for f in on]
    assert names[:5] == ["stop_here", "level3", "level2", "level1", "main"]
    assert "_start" in names, names
    # Up to _start every frame is code in a module (libc's internal functions
    # are named only with its debug symbols); past it (backtrace past-entry is
    # on) the plugin declines the outermost frame and GDB guesses on.
    assert len(names[:names.index("_start")]) == len(results["default"]["frames"]) - 1
    assert results["claimed_on"] > results["claimed_off"]
