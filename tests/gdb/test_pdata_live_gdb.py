"""The `pdata` source live in GDB: a clang-built x64 PE DLL mapped into a Linux process.

tests/fixtures/pe_host.c maps tests/fixtures/pe/x64_live.c's DLL at its ImageBase
(copied into anonymous memory, or each section mapped from the file as Wine does)
and calls pe_entry through an ms_abi pointer; the PE code calls back into the host's
`callback`, which calls `stop_here`, where GDB stops. No debugger lists the DLL as a
module: the module scan finds it from its MZ/PE headers in memory.

Truth: the known call chain. stop_here <- callback <- pe_big <- pe_saves <- pe_frame
<- pe_entry <- call_into_pe <- main. Each PE frame's pc follows a call instruction
(llvm-objdump-16's disassembly) to the function of the frame below it (the callback's
call is indirect), and lies in the function llvm-readobj-16 --unwind and llvm-nm-16
name. GDB's own bt, with the plugin loaded, goes through the PE frames to main (it
takes them from the plugin: GDB does not read .pdata), and its pcs and sps equal the
plugin's walk; with the plugin's unwinder disabled, GDB alone does not reach
call_into_pe.
"""
from __future__ import annotations

import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from pe_images import CHAIN, build_live, check_live_walk, live_run, module_line, readobj_entry
from support import pcs_sps


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return build_live(str(tmp_path_factory.mktemp("pe-live")))


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_walk_goes_through_pe_frames_into_the_c_frames(images, mode):
    run = live_run(images, mode)
    dll, symbols = run.dll, run.symbols
    results, transcript = run_gdb(run.host, [
        ("walk", "json", "unwind backtrace -json"),
        ("modules", "cmd", "unwind modules"),
        ("tables", "json", "unwind tables -json 0x%x" % (symbols["pe_saves"] + 0x10)),
        ("bt", "frames", None),
        *native_frames(),
    ], args=run.args)

    # The module scan found the image by its headers.
    assert module_line(dll, mode).search(results["modules"]), results["modules"]
    assert ".pdata" in results["modules"]
    # `unwind tables` reads the entry from memory: as llvm-readobj-16 --unwind reads the file.
    [source] = results["tables"]["sources"]
    [entry] = source["entries"]
    want = readobj_entry(dll, symbols["pe_saves"])
    assert (source["kind"], entry["start"], entry["end"], entry["unwind_info"]) == \
        ("pdata", want["StartAddress"], want["EndAddress"], want["UnwindInfoAddress"])
    assert [(c["offset"], c["text"]) for c in entry["records"][0]["codes"]] == want["infos"][0]["codes"]
    walk = results["walk"]["frames"]
    check_live_walk(walk, dll)
    assert results["walk"]["stop_reason"] == "outermost", transcript

    # GDB's own bt takes the PE frames from the plugin and reaches main; same pcs and sps.
    gdb_frames = results["bt"]
    names = [f["name"] for f in gdb_frames]
    assert names[:2] == ["stop_here", "callback"] and names[6:8] == ["call_into_pe", "main"], names
    assert pcs_sps(gdb_frames)[:len(CHAIN)] == [(f["pc"], f["sp"]) for f in walk[:len(CHAIN)]]

    # GDB alone does not read .pdata: it does not get from the PE frames to call_into_pe.
    assert "call_into_pe" not in [f["name"] for f in results["native"]], results["native"]
