"""The plugin inside the real GDB, checked against GDB's own unwinder.

Oracle: GDB's native frames (the plugin's unwinder disabled) on fixture
programs built at test time. The plugin's unwinder must not change `bt`,
must actually claim the frames (with `set unwind claim all`: by default it
leaves .eh_frame/.debug_frame frames to GDB's own DWARF unwinder), and
`unwind backtrace -json -sources cfi` must give the same physical frames.
"""

import pytest

from chain_scenarios import BUILDS, GDB_SCENARIOS
from gdb_actions import DISABLE, SIGNAL, claim_all, claimed, native_frames
from gdbrun import run_gdb
from support import assert_cfi_walk_matches, build, corrupted_return_row, pcs

FLAGS = {
    **BUILDS,
    "O2-debug-frame": ["-O2", "-fno-asynchronous-unwind-tables"],   # the program's CFI only in .debug_frame
}

CLAIM_ALL = ["set unwind claim all"]     # prove the plugin's own unwinding inside GDB's bt

STEPS = [
    ("enabled", "frames", None),
    ("ours", "json", "unwind backtrace -json -sources cfi"),
    claimed(),
    ("compare", "json", "unwind compare -json -sources cfi"),
    *native_frames(),
]


@pytest.mark.parametrize("flags", sorted(FLAGS))
@pytest.mark.parametrize("scenario", sorted(GDB_SCENARIOS))
def test_bt_unchanged_and_plugin_walk_matches_gdb(scenario, flags):
    argv, breakpoint, setup, after = GDB_SCENARIOS[scenario]
    binary = build("chain.c", FLAGS[flags])
    actions = [("after%d" % i, "cmd", c) for i, c in enumerate(after)] + STEPS
    results, transcript = run_gdb(binary, actions, args=argv, breakpoint=breakpoint,
                                  setup=CLAIM_ALL + setup)
    native, enabled, ours = results["native"], results["enabled"], results["ours"]
    assert len(native) >= 3, transcript
    # GDB's bt is the same with the plugin's unwinder claiming frames...
    assert pcs(enabled) == pcs(native)
    assert [f["sp"] for f in enabled] == [f["sp"] for f in native]
    # ...and the plugin really did claim them.
    assert results["claimed"] >= len(native) - 2
    # The plugin's own walk gives the same physical frames (GDB stops at main;
    # the plugin goes on to _start, so compare GDB's frames as a prefix).
    assert_cfi_walk_matches(ours, native)
    # `unwind compare` sees full agreement (it compares with past-main on).
    assert results["compare"]["agree"], results["compare"]["summary"]


def test_signal_frame_is_unwound_through_restore_rt():
    binary = build("chain.c", FLAGS["O2"])
    results, _ = run_gdb(binary, [("ours", "json", "unwind backtrace -json -sources cfi"),
                                  ("explain", "json", "unwind explain -json all")],
                         args=["signal"], setup=SIGNAL)
    frames = results["ours"]["frames"]
    names = [f["function"] for f in frames]
    assert "__restore_rt" in names, names
    trampoline = names.index("__restore_rt")
    assert frames[trampoline]["signal_frame"]
    # The frame above the trampoline is the interrupted one: its caller is
    # found by looking up its exact pc, not pc-1.
    interrupted = results["explain"]["frames"][trampoline + 1]
    its_caller = results["explain"]["frames"][trampoline + 2]
    assert its_caller["evidence"]["lookup_pc"] == interrupted["pc"]
    # The innermost pc is exact; ordinary return addresses are looked up at pc-1.
    assert results["explain"]["frames"][1]["evidence"]["lookup_pc"] == frames[0]["pc"]
    assert results["explain"]["frames"][2]["evidence"]["lookup_pc"] == frames[1]["pc"] - 1
    assert "raise_signal" in names[trampoline:]


def test_deep_recursion_10000():
    binary = build("chain.c", FLAGS["O0"])
    results, _ = run_gdb(binary, [("ours", "json", "unwind backtrace -json -sources cfi"),
                                  ("native", "frames", None)], args=["recurse", "10000"])
    ours, native = results["ours"]["frames"], results["native"]
    assert len(native) > 10000
    assert pcs(ours)[:len(native)] == pcs(native)
    assert results["ours"]["stop_reason"] == "outermost"


def test_compare_reports_a_corrupted_return_address():
    """Overwrite level2's saved return address: the two unwinders must now disagree."""
    binary = build("chain.c", FLAGS["O0"])
    corrupt = [
        ("ok", "json", "unwind compare -json"),
        # frame 2 is level2 (stop_here <- level3 <- level2); its return address
        # sits just above the CFA-8 slot of level2's frame.
        ("select", "cmd", "frame 2"),
        ("poke", "cmd", "set var *(long *)($rbp + 8) = 0x1234"),
        ("flush", "cmd", "maintenance flush register-cache"),
        ("bad", "json", "unwind compare -json"),
    ]
    results, _ = run_gdb(binary, corrupt, args=["plain"])
    # GDB follows the bad address; the plugin refuses it (not executable) and stops.
    first = corrupted_return_row(results["ok"], results["bad"])
    assert first["native"]["pc"] == 0x1234


def test_unwinder_is_listed_and_can_be_disabled():
    binary = build("chain.c", FLAGS["O2"])
    results, _ = run_gdb(binary, [
        claim_all(),
        ("info", "cmd", "info unwinder"),
        ("off", "cmd", DISABLE),
        claimed("before"),
        ("bt", "cmd", "bt"),
        claimed("after"),
        ("info2", "cmd", "info unwinder"),
    ], args=["plain"])
    assert "unwind-plugin" in results["info"]
    assert "level1" in results["bt"]
    assert results["after"] == results["before"]          # disabled: claims nothing
    assert "[disabled]" in results["info2"]


def test_modules_tables_and_debug_frame_from_disk():
    """`unwind modules` finds every module's tables in memory (the vdso too); `unwind tables`
    in GDB gives the offline command's rows, moved by the load bias."""
    import json
    import subprocess
    import sys

    from support import ROOT
    binary = build("chain.c", FLAGS["O2-debug-frame"])
    results, _ = run_gdb(binary, [("modules", "json", "unwind modules -json"),
                                  ("tables", "json", "unwind tables -json level2"),
                                  ("addr", "py", "int(gdb.parse_and_eval('level2').address)")],
                         args=["plain"])
    modules = {m["name"]: m for m in results["modules"]["modules"]}
    assert "[vdso]" in modules and modules["[vdso]"]["path"] is None
    assert modules["[vdso]"]["tables"][".eh_frame_hdr"]["found_by"] == "PT_GNU_EH_FRAME"
    libc = next(m for name, m in modules.items() if name.startswith("libc.so"))
    assert libc["tables"][".eh_frame"]["in_memory"]
    ours = modules[binary.name]
    assert ours["tables"][".debug_frame"]["in_memory"] is False
    bias = ours["load_bias"]

    offline = json.loads(subprocess.run(
        [sys.executable, "-m", "plugin", "tables", str(binary), "--json",
         "--address", hex(results["addr"] - bias)], cwd=ROOT, capture_output=True, text=True,
        check=True).stdout)
    live = results["tables"]
    assert [s["section"] for s in live["sources"]] == [s["section"] for s in offline["sources"]] \
        == [".debug_frame"]
    live_entry, offline_entry = live["sources"][0]["entries"][0], offline["sources"][0]["entries"][0]
    assert live_entry["start"] - bias == offline_entry["start"]
    assert live_entry["end"] - bias == offline_entry["end"]
    assert [r["address"] - bias for r in live_entry["rows"]] == [r["address"] for r in offline_entry["rows"]]
    assert [r["cfa"] for r in live_entry["rows"]] == [r["cfa"] for r in offline_entry["rows"]]
