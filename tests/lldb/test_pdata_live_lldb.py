"""The `pdata` source in LLDB's `unwind backtrace`: the live PE DLL of
tests/gdb/test_pdata_live_gdb.py (mapped by tests/fixtures/pe_host.c), found by the
module scan from its headers in the process's memory regions (LLDB lists no module
there), the walk going through the PE frames back into the C frames to main, and
`unwind tables` showing the entry llvm-readobj-16 --unwind shows.
Truth: the known call chain (pe_images.check_live_walk: llvm-nm, llvm-readobj --unwind
and the calls in llvm-objdump's disassembly)."""
from __future__ import annotations

import pytest

from lldbrun import run_lldb
from pe_images import build_live, check_live_walk, live_run, module_line, readobj_entry


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return build_live(str(tmp_path_factory.mktemp("pe-live-lldb")))


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_unwind_backtrace_goes_through_pe_frames(images, mode):
    run = live_run(images, mode)
    dll, symbols = run.dll, run.symbols
    results, transcript = run_lldb(run.host, [
        ("walk", "json", "unwind backtrace --json"),
        ("modules", "cmd", "unwind modules"),
        ("tables", "json", "unwind tables --json 0x%x" % (symbols["pe_big"] + 4)),
    ], args=run.args)
    [source] = results["tables"]["sources"]
    want = readobj_entry(dll, symbols["pe_big"])
    assert [(e["start"], e["end"], e["unwind_info"]) for e in source["entries"]] == \
        [(want["StartAddress"], want["EndAddress"], want["UnwindInfoAddress"])]
    assert module_line(dll, mode).search(results["modules"]["output"]), results["modules"]
    walk = results["walk"]["frames"]
    check_live_walk(walk, dll)
    assert results["walk"]["stop_reason"] == "outermost", transcript
