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

import re
import subprocess

import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from pe_images import build as build_pe, readobj_x64
from support import build, pcs_sps

CHAIN = ["stop_here", "callback", "pe_big", "pe_saves", "pe_frame", "pe_entry", "call_into_pe", "main"]
PE_FUNCTIONS = ("pe_big", "pe_saves", "pe_frame", "pe_entry")


def _symbols(dll):
    """name -> absolute address, from llvm-nm-16 (the DLL's COFF symbol table)."""
    out = subprocess.run(["llvm-nm-16", dll], check=True, capture_output=True, text=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3}


def _calls(dll):
    """return address -> call target ("*" for an indirect call), from llvm-objdump-16."""
    out = subprocess.run(["llvm-objdump-16", "-d", "--no-show-raw-insn", dll], check=True,
                         capture_output=True, text=True).stdout
    calls, previous = {}, None
    for line in out.splitlines():
        match = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
        if not match:
            continue
        address = int(match.group(1), 16)
        if previous is not None:
            calls[address] = previous
            previous = None
        if match.group(2).startswith("call"):
            operand = match.group(3)
            previous = "*" if operand.startswith("*") else int(operand.split()[0], 16)
    return calls


def _image_base(dll):
    out = subprocess.run(["llvm-readobj-16", "--file-headers", dll], check=True, capture_output=True,
                         text=True).stdout
    return int(re.search(r"ImageBase: 0x([0-9A-F]+)", out).group(1), 16)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pe-live"))
    return {"copy": build_pe("x64_live.c", out, dll=True),
            "map": build_pe("x64_live.c", out, dll=True, link_flags=("/filealign:4096",), suffix="-map")}


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_walk_goes_through_pe_frames_into_the_c_frames(images, mode):
    dll = images[mode]
    host = build("pe_host.c", ["-O1"])
    symbols = _symbols(dll)
    ranges = {(fn["StartAddress"], fn["EndAddress"]) for fn in readobj_x64(dll)}
    entry_rva = symbols["pe_entry"] - _image_base(dll)
    results, transcript = run_gdb(host, [
        ("walk", "json", "unwind backtrace -json"),
        ("modules", "cmd", "unwind modules"),
        ("bt", "frames", None),
        *native_frames(),
    ], args=[dll, hex(entry_rva), mode])

    # The module scan found the image by its headers.
    assert re.search(r"(PE image at 0x%x|%s at 0x%x)" % (_image_base(dll), re.escape(dll.rsplit("/", 1)[-1]),
                                                         _image_base(dll)), results["modules"]), results["modules"]
    assert ".pdata" in results["modules"]

    walk = results["walk"]["frames"]
    assert len(walk) >= len(CHAIN), transcript
    by_name = {address: name for name, address in symbols.items()}
    calls = _calls(dll)
    for level, name in enumerate(CHAIN):
        frame = walk[level]
        if name in PE_FUNCTIONS:
            start = symbols[name]
            assert any(lo == start and lo <= frame["pc"] - 1 < hi for lo, hi in ranges), (level, frame)
            callee = CHAIN[level - 1]
            target = calls.get(frame["pc"])
            assert target == ("*" if callee == "callback" else symbols[callee]), (level, hex(frame["pc"]), target)
            assert by_name.get(start) == name
        else:
            assert frame["function"] == name, (level, frame)
    # Every frame whose callee is a PE function was recovered from .pdata.
    for level in range(3, 7):
        assert walk[level]["method"] == "pdata", walk[level]
    assert results["walk"]["stop_reason"] == "outermost"

    # GDB's own bt takes the PE frames from the plugin and reaches main; same pcs and sps.
    gdb_frames = results["bt"]
    names = [f["name"] for f in gdb_frames]
    assert names[:2] == ["stop_here", "callback"] and names[6:8] == ["call_into_pe", "main"], names
    assert pcs_sps(gdb_frames)[:len(CHAIN)] == [(f["pc"], f["sp"]) for f in walk[:len(CHAIN)]]

    # GDB alone does not read .pdata: it does not get from the PE frames to call_into_pe.
    assert "call_into_pe" not in [f["name"] for f in results["native"]], results["native"]
