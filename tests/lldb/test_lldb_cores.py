"""The plugin on cores in LLDB: kernel cores, gcore's, and LLDB's own `process save-core`.

A kernel core keeps only the first page of each file-backed read-only
mapping, so every module's unwind tables are missing from it; LLDB itself
reads them from the module's file. The plugin's LLDB target does the same
(page by page, the file only for sections that are not writable), so on
every core its walk equals LLDB's own frames, and `unwind modules` finds
each table through PT_GNU_EH_FRAME as on a live process.

Cores of tests/fixtures/core_abort.c: `abort` (the kernel's core, under
`ulimit -c unlimited`, when /proc/sys/kernel/core_pattern writes a file in
the working directory), and stopped at stop_here: GDB's `gcore`, and LLDB's
`process save-core` (a minidump; LLDB 16 cannot write cores on Linux, 19
and 22 can). Oracle: LLDB's own SBFrames on the same core.
"""

import glob
import os
import resource
import subprocess

import pytest

from lldbrun import physical, run_batch, run_lldb, version
from support import build, need_tool

STEPS = [("plugin", "py", "process.GetPluginName()"),
         ("frames", "frames", None),
         ("ours", "json", "unwind backtrace --json"),
         ("compare", "json", "unwind compare --json"),
         ("modules", "json", "unwind modules --json")]


def _kernel_core(binary, where):
    pattern = open("/proc/sys/kernel/core_pattern").read().strip()
    if pattern.startswith("|") or "/" in pattern or not pattern.startswith("core"):
        pytest.skip("core_pattern %r does not write a core in the working directory" % pattern)

    def unlimited():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    proc = subprocess.run([str(binary), "abort"], cwd=where, preexec_fn=unlimited, capture_output=True)
    assert proc.returncode == -6, proc
    cores = glob.glob(os.path.join(where, "core*"))
    assert len(cores) == 1, (os.listdir(where), pattern)
    return cores[0]


def _gcore(binary, where):
    core = os.path.join(where, "gcore.core")
    proc = subprocess.run([need_tool("gdb"), "-nx", "-q", "-batch", "-ex", "break stop_here", "-ex", "run",
                           "-ex", "gcore %s" % core, str(binary)], capture_output=True, text=True, timeout=300)
    assert os.path.exists(core), proc.stdout + proc.stderr
    return core


def _save_core(binary, where):
    core = os.path.join(where, "save.core")
    status, transcript = run_batch(binary, ["breakpoint set --name stop_here", "process launch",
                                            "process save-core %s" % core], import_plugin=False)
    if version() < 19:
        assert "no ObjectFile plugins were able to save a core" in transcript, transcript[-2000:]
        return None         # LLDB 16 cannot write a core on Linux: its refusal is what is checked
    assert status == 0 and os.path.exists(core), transcript[-2000:]
    return core


@pytest.mark.parametrize("kind", ["kernel", "gcore", "save-core"])
def test_walk_on_a_core_equals_lldb(kind, tmp_path):
    binary = build("core_abort.c", ["-O2", "-g"])
    core = {"kernel": _kernel_core, "gcore": _gcore, "save-core": _save_core}[kind](binary, str(tmp_path))
    if core is None:
        return
    results, transcript = run_lldb(binary, STEPS, core=core)
    assert results["plugin"] in ("elf-core", "minidump"), results["plugin"]
    theirs = physical(results["frames"])
    ours = results["ours"]["frames"]
    names = [f["function"] for f in ours]
    assert [(f["pc"], f["sp"]) for f in ours] == [(f["pc"], f["sp"]) for f in theirs], (ours, theirs)
    assert names[-1] == "_start" and "main" in names, names
    for caller in ("level1", "level2", "level3"):       # level3 may be level3.cold
        assert any(name.startswith(caller) for name in names), (caller, names)
    if kind == "kernel":
        assert "abort" in " ".join(names), names
    assert results["ours"]["stop_reason"] == "outermost", results["ours"]
    assert results["compare"]["agree"], results["compare"]["summary"]
    # `unwind modules`: every .eh_frame found through its .eh_frame_hdr, never
    # "(no .eh_frame_hdr)" beside a header found by PT_GNU_EH_FRAME.
    modules = {m["name"]: m["tables"] for m in results["modules"]["modules"]}
    assert "libc.so.6" in modules, modules
    for name, tables in modules.items():
        if ".eh_frame_hdr" in tables:
            assert tables[".eh_frame_hdr"]["found_by"] == "PT_GNU_EH_FRAME", (name, tables)
            assert "no .eh_frame_hdr" not in tables[".eh_frame"]["found_by"], (name, tables)
    # A minidump leaves the vdso's memory out (it has no file to read instead):
    # that module, and only that one, is listed as unreadable.
    for entry in results["modules"]["unreadable"]:
        assert entry["name"].startswith("[vdso]") and kind == "save-core", entry
