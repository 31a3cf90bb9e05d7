"""An emulated Mach-O stop served to LLDB (16, 19, 22) as a scripted process: the plugin's walk against LLDB's.

tests/helpers/compact_unwind_support.py runs unwind_engine.c (built here for
x86_64 and arm64, four flag sets each) in Unicorn and stops it at
stop_here's entry, at chain3's call to it, at stop_here's return and inside
the DWARF-mode leaf dwarf_only, keeping the truth (each active call's return
address, the caller's stack pointer and callee-saved registers). Each stop
is written as a snapshot (registers, the stack, the dylib's segments at
their load address) and served to LLDB by lldb_commands/scripted_process.py
(`process launch -C lldb_commands.scripted_process.SnapshotProcess -k
snapshot -v STOP.json`): LLDB 16 on Linux runs scripted processes, so its
own unwinder walks the stack from the Mach-O's compact unwind, and the
plugin's commands read the same memory through SBProcess.

Asserted, frame by frame (one LLDB session per build, the four stops in turn):
  * `unwind backtrace --json` (default sources, and `--sources compact`
    alone) and LLDB's own frames (SBFrame pc, sp, CFA) are the same, and
    both are the emulator's truth; so are the callee-saved registers both
    report for every caller; `unwind compare` agrees;
  * which plan LLDB unwound each frame with (its `lldb unwind` log) is the
    one the plugin's opcode calls for:
      RBP_FRAME   LLDB's "fast" x86_64 default plan (the rbp chain: the same
                  rule), then compact unwind when it needs more registers
      STACK_IMMD, FRAME   compact unwind info
      DWARF       eh_frame CFI (LLDB goes to the FDE itself)
      STACK_IND   NOT compact unwind: the known LLDB 16 failure (it makes no
                  compact plan for x86_64 STACK_IND); LLDB gets the frame
                  right anyway, from assembly instruction profiling
    and the innermost frame never with compact unwind (LLDB wants a plan
    valid at every instruction there: instruction profiling or emulation,
    or the FDE); the plugin uses the opcode there (FRAMELESS, the leaves'
    mode on arm64, is only ever innermost here), with the ABI's rule at the
    entry and at a return.
Known difference, asserted: the outermost frame (engine_main, whose return
address is the emulator's sentinel, not code). LLDB reports its CFA (the
caller's sp, which its plan computed before it rejected the return
address); the plugin's walk rejects the step and reports the CFA as null.
"""

import json
import re

import pytest

from lldbrun import batch_json, batch_outputs, run_batch, run_lldb, version
from compact_unwind_support import BUILDS, SENTINEL, STOPS, Emulation, build_id, frozen_at
from lldb_macho_support import LAUNCH, emulator_snapshot, plans_from_log

COMPACT = ("full", "compact unwind info")
FAST_X86 = ("fast", "x86_64 default unwind plan")
EH_FRAME = ("full", "eh_frame CFI")
STACK_IND_IN_LLDB = ("full", "assembly insn profiling")
INNERMOST_PLANS = {"assembly insn profiling", "EmulateInstructionARM64", "eh_frame CFI",
                   "eh_frame CFI plus augmentation from assembly parsing"}
# SBFrame registers of every frame: {name: value}, None where LLDB has no value.
REGISTERS = ("[{v.GetName(): (v.GetValueAsUnsigned() if v.GetValue() is not None else None) "
             "for v in f.GetRegisters().GetValueAtIndex(0)} for f in thread]")


def _steps(stop, snapshot, log):
    return [("log-" + stop, "cmd", "log enable -f %s lldb unwind" % log),
            ("launch-" + stop, "cmd", LAUNCH % snapshot),
            ("frames-" + stop, "frames", None),
            ("registers-" + stop, "py", REGISTERS),
            ("bt-" + stop, "json", "unwind backtrace --json"),
            ("compact-" + stop, "json", "unwind backtrace --json --sources compact"),
            ("explain-" + stop, "json", "unwind explain --json all"),
            ("compare-" + stop, "json", "unwind compare --json"),
            ("unlog-" + stop, "cmd", "log disable lldb unwind"),
            ("kill-" + stop, "cmd", "process kill")]


def _expected_plans(mode):
    """The plans LLDB may unwind a caller frame with, given its function's opcode mode."""
    if mode == "RBP_FRAME":
        return FAST_X86, COMPACT
    if mode == "STACK_IND":
        return (STACK_IND_IN_LLDB,)
    if mode == "DWARF":
        return (EH_FRAME,)
    return (COMPACT,)


@pytest.mark.parametrize("arch,flags", BUILDS, ids=build_id)
def test_scripted_process_backtrace_matches_lldb(arch, flags, tmp_path):
    em = Emulation(arch, flags)
    steps, truths = [], {}
    for stop in STOPS:
        _, truths[stop] = frozen_at(em, stop)
        snapshot = emulator_snapshot(em, tmp_path / ("%s.json" % stop))
        steps += _steps(stop, snapshot, tmp_path / ("%s.log" % stop))
    results, _ = run_lldb(em.path, steps, launch=False)
    names = em.arch.registers
    modes_seen = set()
    for stop in STOPS:
        where = "%s %s %s" % (arch, flags, stop)
        assert results["launch-" + stop]["ok"], (where, results["launch-" + stop])
        theirs = results["frames-" + stop]
        bt = results["bt-" + stop]
        ours = bt["frames"]
        truth = [(ra, sp, saved) for _, ra, sp, saved in reversed(truths[stop])]
        # The same frames on both sides, and both are the truth.
        assert [(f["pc"], f["sp"]) for f in ours] == [(f["pc"], f["sp"]) for f in theirs], where
        assert [(f["pc"], f["sp"]) for f in ours[1:]] == [(ra, sp) for ra, sp, _ in truth[:-1]], where
        assert [(f["pc"], f["sp"]) for f in results["compact-" + stop]["frames"]] \
            == [(f["pc"], f["sp"]) for f in ours], where
        assert bt["stop_reason"] == "return-address-not-code" and "0x%x" % SENTINEL in bt["stop_detail"]
        assert results["compare-" + stop]["agree"], (where, results["compare-" + stop]["summary"])
        # CFAs: the same, except the outermost frame's (see the module docstring).
        assert [f["cfa"] for f in ours[:-1]] == [f["cfa"] for f in theirs[:-1]], where
        assert ours[-1]["cfa"] is None and theirs[-1]["cfa"] == truth[-1][1], where
        # Callee-saved registers of every caller: the plugin's, LLDB's and the truth.
        explained = results["explain-" + stop]["frames"]
        lldb_registers = results["registers-" + stop]
        for level in range(1, len(ours)):
            saved = truth[level - 1][2]
            plugin_values = {n: explained[level]["registers"].get(names[n]) for n in saved}
            lldb_values = {n: lldb_registers[level].get(names[n]) for n in saved}
            assert plugin_values == saved, (where, level, plugin_values, saved)
            assert lldb_values == saved, (where, level, lldb_values, saved)
        # The plan LLDB used for each frame, against the opcode the plugin used.
        with open(tmp_path / ("%s.log" % stop)) as handle:
            plans = plans_from_log(handle.read())
        assert len(plans[0]) == 1 and plans[0][0][1] in INNERMOST_PLANS, (where, plans[0])
        assert explained[0]["method"] == "context" and explained[1]["method"] == "compact"
        for level in range(1, len(ours) - 1):
            mode = explained[level + 1]["evidence"]["entry"]["mode"]
            modes_seen.add(mode)
            expected = _expected_plans(mode)
            assert plans[level][0] == expected[0] and set(plans[level]) <= set(expected), \
                (where, level, ours[level]["function"], mode, plans[level])
        innermost_mode = explained[1]["evidence"]["entry"]["mode"]
        if stop in ("entry", "ret") and innermost_mode != "DWARF":
            assert explained[1]["evidence"]["found_by"].endswith("ABI rule at %s" % stop.replace("ret", "return"))
    expected_modes = {"x86_64": {"O2-fp": {"RBP_FRAME", "DWARF"}, "O0": {"RBP_FRAME", "DWARF"},
                                 "O2-nofp": {"STACK_IMMD", "STACK_IND", "DWARF"},
                                 "Os-nofp": {"STACK_IMMD", "STACK_IND", "DWARF"}},
                      "arm64": {"O2-fp": {"FRAME", "DWARF"}, "O0": {"FRAME", "DWARF"},
                                "O2-nofp": {"DWARF"}, "Os-nofp": {"DWARF"}}}[arch][flags]
    assert modes_seen == expected_modes, modes_seen


def test_snapshot_served_as_a_process(tmp_path):
    """The scripted process itself: memory, regions, registers, modules; the
    plugin's mappings, walked region by region, against LLDB 16's wrong
    SBProcess.GetMemoryRegions; a snapshot that cannot be read."""
    em = Emulation("x86_64", "O2-nofp")
    _, truth = frozen_at(em, "call")
    snapshot = emulator_snapshot(em, tmp_path / "stop.json")
    sp = em.registers()[em.sp]
    mappings = sorted((m.start, m.end, m.executable) for m in em.mapping_list())
    steps = [
        ("bad", "cmd", LAUNCH % (tmp_path / "missing.json")),
        ("bad_status", "cmd", "process status"),
        ("bad_threads", "py", "process.GetNumThreads()"),
        ("kill_bad", "cmd", "process kill"),
        ("launch", "cmd", LAUNCH % snapshot),
        ("image_list", "py", "[(m.GetFileSpec().fullpath, m.GetObjectFileHeaderAddress().GetLoadAddress(target)) "
                             "for m in target.module_iter()]"),
        ("word", "py", "process.ReadUnsignedFromMemory(0x%x, 8, lldb.SBError())" % sp),
        ("outside", "py", "(lambda e: (process.ReadMemory(0x100, 8, e), e.Fail()))(lldb.SBError())"),
        ("rsp", "py", "frame.FindRegister('rsp').GetValueAsUnsigned()"),
        ("region_stack", "cmd", "memory region 0x%x" % sp),
        ("lldb_regions", "py", "(lambda l: [(l.GetMemoryRegionAtIndex(i, r) and (r.GetRegionBase(), "
                               "r.GetRegionEnd(), r.IsMapped())) for i in range(l.GetSize()) "
                               "for r in [lldb.SBMemoryRegionInfo()]])(process.GetMemoryRegions())"),
        ("plugin_mappings", "py", "[(m.start, m.end, m.executable) for m in __import__('lldb_commands.target', "
                                  "fromlist=['target']).LldbTarget(target).mappings()]"),
        ("modules", "json", "unwind modules --json"),
        ("continue", "cmd", "continue"),
        ("after_continue", "py", "frame.GetPC()"),
    ]
    results, transcript = run_lldb(em.path, steps, launch=False)
    # A snapshot that cannot be read: one error line, no traceback, no threads.
    bad_lines = [line for line in transcript.splitlines() if "snapshot cannot be served" in line]
    assert len(bad_lines) == 1 and "missing.json" in bad_lines[0], transcript[-2000:]
    assert results["bad_threads"] == 0
    # The good one.
    assert results["launch"]["ok"], results["launch"]
    assert results["image_list"] == [[str(em.path), em.module_ref().header_address]]     # one copy
    assert results["word"] == int.from_bytes(em.uc.mem_read(sp, 8), "little")
    assert results["outside"][1] is True
    assert results["rsp"] == sp
    assert "[0x%016x-0x%016x) rw-" % (0x07000000, 0x07100000) in results["region_stack"]["output"]
    assert [list(m) for m in mappings] == results["plugin_mappings"]
    # LLDB 16's own list skips regions (its walk adds base + size to the address).
    lldb_mapped = [r[:2] for r in results["lldb_regions"] if r and r[2]]
    assert lldb_mapped != [[s, e] for s, e, _ in mappings]
    (module,) = results["modules"]["modules"]
    assert module["base"] == em.module_ref().header_address and module["format"] == "macho"
    assert module["uuid"] and "__unwind_info" in module["tables"]
    # The snapshot cannot run: `continue` leaves it where it was.
    assert results["after_continue"] == em.registers()[em.pc]


def test_snapshot_in_batch_mode(tmp_path):
    """`lldb -b -o "process launch -C ..." -o bt ...`: in every version the image is
    loaded at its address, LLDB's `bt` names its functions, the plugin's walk
    is the same, and batch mode goes on after the launch and after `continue`
    (a snapshot stops with SIGSTOP, which batch mode does not take for a crash)."""
    em = Emulation("x86_64", "O2-nofp")
    _, truth = frozen_at(em, "call")
    snapshot = emulator_snapshot(em, tmp_path / "stop.json")
    commands = [LAUNCH % snapshot, "bt", "unwind backtrace --json", "image list", "unwind modules --json",
                "continue", "unwind backtrace --json"]
    status, transcript = run_batch(em.path, commands)
    assert status == 0, transcript[-3000:]
    outputs = dict(batch_outputs(transcript))
    assert set(commands) <= set(outputs), ("LLDB %d stopped the batch early" % version(), transcript[-3000:])
    assert "stop reason = signal SIGSTOP" in outputs["bt"], outputs["bt"]
    lldb_pcs = [int(m, 16) for m in re.findall(r"frame #\d+: (0x[0-9a-f]+) \S+`\w+", outputs["bt"])]
    ours = batch_json(transcript, "unwind backtrace --json")["frames"]
    assert lldb_pcs == [f["pc"] for f in ours], (outputs["bt"], ours)
    assert [f["pc"] for f in ours][1:] == [ra for _, ra, _, _ in reversed(truth)][:len(ours) - 1]
    assert all(f["module"] == em.path.name for f in ours), ours
    assert "0x%016x" % em.module_ref().header_address in outputs["image list"]
    (module,) = json.loads(outputs["unwind modules --json"][outputs["unwind modules --json"].index("{"):])["modules"]
    assert module["base"] == em.module_ref().header_address and "__unwind_info" in module["tables"]
