"""The `sframe` source inside the real GDB (x86_64, natively).

Oracle: GDB's own physical frames with the plugin's unwinder disabled, on
the corpus demo (SFrame v3, `../shared/oracles/sframe-v3-demo/`) and on the
fixture built with `gcc -Wa,--gsframe` (SFrame v1).

What "the same pcs as GDB's bt" means with `-sources sframe` alone: the
demo's own functions have SFrame, libc has none (Debian builds it without),
so a walk on SFrame alone can only cover the runs of frames whose callees
are the program's functions. It is checked on both runs: from `stop_here`
up to the signal trampoline `__restore_rt` (which it reaches, then stops:
libc has no .sframe), and from `realign` down through `recurse` to `main`
and its return address in `__libc_start_call_main`. The whole stack is
then checked with `-sources sframe,cfi`: every pc equals GDB's, and every
frame whose callee is a program function was recovered by sframe (the rest
by cfi).
"""


import pytest

from gdb_actions import SIGNAL, native_frames
from gdbrun import run_gdb
from sframe_demo import SFRAME_WALKS, STRIP_CFI, demo_copy
from support import build, pcs


def test_demo_sframe_only_walks_match_gdb(tmp_path):
    demo = demo_copy(tmp_path, 'x86_64', stripped=False)
    results, transcript = run_gdb(demo, [
        ("both", "json", "unwind backtrace -json -sources sframe,cfi"),
        *SFRAME_WALKS,
        *native_frames(),
    ], args=["2"], setup=SIGNAL)
    native = results["native"]
    names = [f["name"] for f in native]
    assert names[0] == "stop_here" and "realign" in names and names[-1] == "main", transcript

    # stop_here -> the signal trampoline: both frames, then libc has no SFrame.
    ours = results["from_stop"]
    assert pcs(ours["frames"]) == pcs(native[:2])
    assert [f["sp"] for f in ours["frames"]] == [f["sp"] for f in native[:2]]
    assert ours["frames"][1]["method"] == "sframe"
    assert ours["frames"][1]["module"] == "libc.so.6"
    assert ours["stop_reason"] == "no-unwind-info"
    assert "libc.so.6 has no .sframe" in ours["stop_detail"]

    # realign -> recurse... -> main -> its return address in libc, all by SFrame.
    ours = results["from_realign"]["frames"]
    start = names.index("realign")
    expected = native[start:]
    assert pcs(ours)[:len(expected)] == pcs(expected)
    assert [f["sp"] for f in ours][:len(expected)] == [f["sp"] for f in expected]
    assert all(f["method"] == "sframe" for f in ours[1:])
    assert len(ours) == len(expected) + 1 and ours[-1]["function"] == "__libc_start_call_main"
    assert results["from_realign"]["stop_reason"] == "no-unwind-info"

    # The whole stack with SFrame first and CFI for libc.
    both = results["both"]["frames"]
    assert pcs(both)[:len(native)] == pcs(native)
    assert results["both"]["stop_reason"] == "outermost"
    for callee, frame in zip(both, both[1:]):
        expected_source = "sframe" if callee["module"] == "demo" else "cfi"
        assert frame["method"] == expected_source, (callee, frame)
    # Callees stop_here, realign, recurse x2, main (recurse(0) tail-calls realign: no frame).
    assert sum(f["method"] == "sframe" for f in both) == 5


def test_demo_explain_shows_the_flex_drap_rule(tmp_path):
    demo = demo_copy(tmp_path, 'x86_64', stripped=False)
    results, _ = run_gdb(demo, [
        ("explain", "json", "unwind explain -json -sources sframe,cfi all"),
        ("text", "cmd", "unwind explain -sources sframe,cfi all"),   # levels are GDB's: tail-call frames count
    ], args=["2"], setup=SIGNAL)
    frames = results["explain"]["frames"]
    names = [f["function"] for f in frames]
    assert names.index("realign") == 4
    realign_caller = frames[5]          # recovered from realign's registers
    ev = realign_caller["evidence"]
    assert ev["source"] == "sframe" and ev["section"] == ".sframe"
    entry = ev["entry"]
    assert entry["fde_type"] == "flex" and entry["fde_index"] == 6
    assert entry["rules"]["cfa"] == "CFA = *(rbp-16)"
    assert entry["rules"]["fp"] == "rbp = *(rbp+0)"
    assert entry["fre_index"] == 3 and entry["cfa_base"] == "rbp"
    assert [w["value"] for w in entry["data_words"]] == [51, -16, 0, 51, 0]
    assert ev["row"].startswith("CFA=*(rbp-16)")
    assert [r["what"] for r in ev["reads"]][0] == "CFA"
    assert realign_caller["native"]["agrees"]
    assert "rule: CFA = *(rbp-16)" in results["text"]


def test_stripped_demo_gdb_loses_the_chain_and_sframe_recovers_it(tmp_path):
    plain = demo_copy(tmp_path, 'x86_64', stripped=False)
    stripped = demo_copy(tmp_path, 'x86_64', stripped=True)
    right, _ = run_gdb(plain, native_frames("frames"), args=["2"], setup=SIGNAL)
    right = right["frames"]
    results, transcript = run_gdb(stripped, [
        ("enabled", "frames", None),
        ("ours", "json", "unwind backtrace -json"),
        ("compare", "json", "unwind compare -json"),
        *native_frames("alone"),
    ], args=["2"], setup=SIGNAL)
    alone, enabled = results["alone"], results["enabled"]
    realign = [f["name"] for f in right].index("realign")
    # GDB alone: right up to realign, then lost (0x1818... is the VLA's fill).
    assert pcs(alone[:realign + 1]) == pcs(right[:realign + 1])
    assert alone[realign + 1]["pc"] != right[realign + 1]["pc"]
    assert alone[realign + 1]["name"] is None
    # With the plugin's unwinder: every frame right, down to main.
    assert pcs(enabled) == pcs(right), transcript
    # The plugin's own walk agrees, and says SFrame found the program's frames.
    ours = results["ours"]["frames"]
    assert pcs(ours)[:len(right)] == pcs(right)
    assert [f["method"] for f in ours[realign + 1:len(right)]] == ["sframe"] * (len(right) - realign - 1)
    rows = results["compare"]["frames"]
    first = next(r for r in rows if not r["agrees"])
    # The first physical frame after realign; its level is GDB's (tail-call frames count).
    assert rows.index(first) == realign + 1 and "plugin looks right" in first["verdict"]
    assert first["level"] == ours[realign + 1]["level"]


@pytest.mark.parametrize("mode", [["plain"], ["recurse", "6"]])
def test_v1_fixture_without_cfi_gives_the_right_bt(mode):
    """gcc -Wa,--gsframe (SFrame v1), .eh_frame removed: GDB's bt through the plugin is right."""
    flags = ["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    plain = build("chain.c", flags)
    stripped = build("chain.c", flags, post=[["objcopy", *STRIP_CFI, "{out}"]])
    right, _ = run_gdb(plain, native_frames("frames"), args=mode)
    right = right["frames"]
    results, transcript = run_gdb(stripped, [("enabled", "frames", None),
                                             ("ours", "json", "unwind backtrace -json -sources sframe")],
                                  args=mode)
    assert len(right) >= 4
    assert pcs(results["enabled"]) == pcs(right), transcript
    ours = results["ours"]["frames"]
    assert pcs(ours)[:len(right)] == pcs(right)
    assert all(f["method"] == "sframe" for f in ours[1:len(right)])


def test_v1_deep_recursion_by_sframe_alone():
    binary = build("chain.c", ["-O0", "-Wa,--gsframe"])
    results, _ = run_gdb(binary, [("ours", "json", "unwind backtrace -json -sources sframe"), *native_frames()],
                         args=["recurse", "10000"])
    ours, native = results["ours"]["frames"], results["native"]
    assert len(native) > 10000
    # Down to main by SFrame, then main's return address in libc, which has none.
    assert pcs(ours)[:len(native)] == pcs(native)
    assert len(ours) == len(native) + 1
    assert all(f["method"] == "sframe" for f in ours[1:])
    assert results["ours"]["stop_reason"] == "no-unwind-info"
