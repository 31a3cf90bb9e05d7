"""The `pdata` source in LLDB's `unwind backtrace`: the live PE DLL of
tests/gdb/test_pdata_live_gdb.py (mapped by tests/fixtures/pe_host.c), found by the
module scan from its headers in the process's memory regions (LLDB lists no module
there), the walk going through the PE frames back into the C frames to main.
Truth: the known call chain (pe_images.check_live_walk: llvm-nm, llvm-readobj --unwind
and the calls in llvm-objdump's disassembly)."""
from __future__ import annotations

import pytest

from lldbrun import run_lldb
from pe_images import build_live, check_live_walk, image_base, module_line, nm_symbols
from support import build


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return build_live(str(tmp_path_factory.mktemp("pe-live-lldb")))


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_unwind_backtrace_goes_through_pe_frames(images, mode):
    dll = images[mode]
    host = build("pe_host.c", ["-O1"])
    entry_rva = nm_symbols(dll)["pe_entry"] - image_base(dll)
    results, transcript = run_lldb(host, [
        ("walk", "json", "unwind backtrace --json"),
        ("modules", "cmd", "unwind modules"),
    ], args=[dll, hex(entry_rva), mode])
    assert module_line(dll, mode).search(results["modules"]["output"]), results["modules"]
    walk = results["walk"]["frames"]
    check_live_walk(walk, dll)
    assert results["walk"]["stop_reason"] == "outermost", transcript
