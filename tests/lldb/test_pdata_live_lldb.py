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
from pe_images import build_live, check_live_walk, image_base, module_line, nm_symbols, readobj_x64
from support import build


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return build_live(str(tmp_path_factory.mktemp("pe-live-lldb")))


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_unwind_backtrace_goes_through_pe_frames(images, mode):
    dll = images[mode]
    host = build("pe_host.c", ["-O1"])
    symbols = nm_symbols(dll)
    entry_rva = symbols["pe_entry"] - image_base(dll)
    results, transcript = run_lldb(host, [
        ("walk", "json", "unwind backtrace --json"),
        ("modules", "cmd", "unwind modules"),
        ("tables", "json", "unwind tables --json 0x%x" % (symbols["pe_big"] + 4)),
    ], args=[dll, hex(entry_rva), mode])
    [source] = results["tables"]["sources"]
    [want] = [f for f in readobj_x64(dll) if f["StartAddress"] == symbols["pe_big"]]
    assert [(e["start"], e["end"], e["unwind_info"]) for e in source["entries"]] == \
        [(want["StartAddress"], want["EndAddress"], want["UnwindInfoAddress"])]
    assert module_line(dll, mode).search(results["modules"]["output"]), results["modules"]
    walk = results["walk"]["frames"]
    check_live_walk(walk, dll)
    assert results["walk"]["stop_reason"] == "outermost", transcript
