"""`python -m plugin tables --json` on PE files: every entry equals llvm-readobj-16
--unwind's, field by field (x64: ranges, each record's header, codes and chained entry;
ARM64: packed fields, or the .xdata header, prologue opcodes and epilogue scopes), on
clang-built images at -O0 and -O2, executables and DLLs, and the hand-written ones."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pe_images import build, readobj_arm64, readobj_x64

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
ARM64 = "aarch64-pc-windows-msvc"
YES = {True: "Yes", False: "No"}
X64_IMAGES = [("x64_funcs.c", "-O0", False), ("x64_funcs.c", "-O2", False), ("x64_funcs.c", "-O2", True),
              ("x64_codes.s", "-O0", False), ("x64_chained.s", "-O0", False)]
ARM64_IMAGES = [("x64_funcs.c", "-O0", False), ("x64_funcs.c", "-O2", False), ("x64_funcs.c", "-O2", True),
                ("arm64_codes.s", "-O0", False)]


def _tables_json(path, *extra):
    run = subprocess.run([sys.executable, "-m", "plugin", "tables", "--json", *extra, path], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["problems"] == [] and len(doc["sources"]) == 1
    source = doc["sources"][0]
    assert source["kind"] == "pdata" and source["section"] == ".pdata"
    return source


@pytest.mark.parametrize("source,opt,dll", X64_IMAGES)
def test_x64_entries_equal_llvm_readobj(tmp_path, source, opt, dll):
    path = build(source, str(tmp_path), opt=opt, dll=dll)
    ours = _tables_json(path)
    theirs = readobj_x64(path)
    assert ours["machine"] == "AMD64"
    assert len(ours["entries"]) == len(theirs) > 0
    for entry, want in zip(ours["entries"], theirs):
        assert (entry["start"], entry["end"], entry["unwind_info"]) == \
            (want["StartAddress"], want["EndAddress"], want["UnwindInfoAddress"])
        record, w = entry["records"][0], want["infos"][0]      # readobj prints the first record
        assert record["address"] == want["UnwindInfoAddress"]
        assert (record["version"], record["flags"], record["prolog_size"], record["frame_offset"] // 16,
                record["code_slots"]) == (w["version"], w["flags"], w["prolog"], w["frame_offset_field"],
                                          w["count"])
        assert (record["frame_register"] is None) == (w["frame_register"] == 0)
        assert [(c["offset"], c["text"]) for c in record["codes"]] == w["codes"]
        chained = record["chained"]
        assert (None if chained is None else [chained["start"], chained["end"], chained["unwind_info"]]) \
            == w["chained"]
        assert len(entry["records"]) == (1 if chained is None else 2)
        assert record["handler"] == w.get("handler")


@pytest.mark.parametrize("source,opt,dll", ARM64_IMAGES)
def test_arm64_entries_equal_llvm_readobj(tmp_path, source, opt, dll):
    path = build(source, str(tmp_path), target=ARM64, opt=opt, dll=dll)
    ours = _tables_json(path)
    theirs = readobj_arm64(path)
    assert ours["machine"] == "ARM64"
    assert len(ours["entries"]) == len(theirs) > 0
    for entry, want in zip(ours["entries"], theirs):
        assert entry["start"] == want["Function"]
        if "packed" in entry:
            p = entry["packed"]
            assert (YES[entry["flag"] == "FRAGMENT"], str(p["function_length"]), str(p["reg_f"]),
                    str(p["reg_i"]), YES[p["homed"]], str(p["cr"]), str(p["frame_size"])) == \
                (want["Fragment"], want["FunctionLength"], want["RegF"], want["RegI"],
                 want["HomedParameters"], want["CR"], want["FrameSize"])
            continue
        x = entry["xdata"]
        assert x["address"] == want["ExceptionRecord"]
        assert (str(x["function_length"]), str(x["version"]), YES[x["exception_data"]],
                YES[x["epilogue_packed"]], str(x["code_bytes"])) == \
            (want["FunctionLength"], want["Version"], want["ExceptionData"], want["EpiloguePacked"],
             want["ByteCodeLength"])
        assert [op["bytes"] for op in x["prologue"]] == want["prologue"]
        if x["epilogue_packed"]:
            assert str(x["epilogue_index"]) == want["EpilogueOffset"]
        else:
            assert str(len(x["epilogue_scopes"])) == want["EpilogueScopes"]
            assert [[s["offset"] // 4, s["start_index"], [op["bytes"] for op in s["opcodes"]]]
                    for s in x["epilogue_scopes"]] == want["scopes"]


@pytest.mark.parametrize("target", [ARM64, "x86_64-pc-windows-msvc"])
def test_address_picks_the_entry_llvm_readobj_has_there(tmp_path, target):
    """`tables --json --address A`: the one entry whose function holds A (the last byte of each
    function llvm-readobj lists, and its first), none outside every function."""
    path = build("x64_funcs.c", str(tmp_path), target=target, opt="-O0")
    every = _tables_json(path)["entries"]
    if target == ARM64:
        ends = [e["start"] + (e.get("packed") or e.get("xdata"))["function_length"] for e in every]
        assert [e["start"] for e in every] == [f["Function"] for f in readobj_arm64(path)]
    else:
        ends = [e["end"] for e in every]
        assert [(e["start"], e["end"]) for e in every] == \
            [(f["StartAddress"], f["EndAddress"]) for f in readobj_x64(path)]
    for entry, end in zip(every, ends):
        for address in (entry["start"], end - 1):
            assert _tables_json(path, "--address", hex(address))["entries"] == [entry]
    assert _tables_json(path, "--address", "0x10")["entries"] == []


def _tables(path, *extra):
    return subprocess.run([sys.executable, "-m", "plugin", "tables", *extra, path], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_sources_option_selects_pdata(tmp_path):
    """--sources works on PE files as on ELF ones: with pdata in the list the entries are those
    llvm-readobj prints (the same JSON as without the option); without it no table, exit 0, as an
    ELF file without the sources named gives (/bin/true, read by the same command)."""
    path = build("x64_funcs.c", str(tmp_path), opt="-O2")
    plain = _tables_json(path)
    for listed in ("pdata", "cfi,pdata", "pdata,sframe"):
        assert _tables_json(path, "--sources", listed) == plain
    assert len(plain["entries"]) == len(readobj_x64(path)) > 0
    for as_json in ((), ("--json",)):
        pe = _tables(path, "--sources", "cfi,sframe", *as_json)
        elf = _tables("/bin/true", "--sources", "orc", *as_json)
        assert pe.returncode == elf.returncode == 0 and pe.stderr == ""
        if as_json:
            assert json.loads(pe.stdout) == json.loads(elf.stdout) == {"sources": [], "problems": []}
        else:
            assert pe.stdout.startswith(elf.stdout.strip()) and "pdata" in pe.stdout and pe.stdout.count("\n") == 1
    text = _tables(path, "--sources", "pdata")
    assert text.returncode == 0 and text.stdout == _tables(path).stdout and "RuntimeFunction 0x" in text.stdout


def test_arch_option_is_refused_in_one_line(tmp_path):
    """--arch chooses a slice of a universal Mach-O file: refused for a PE file as for an ELF one,
    one line saying why, exit 2."""
    path = build("x64_funcs.c", str(tmp_path), opt="-O2")
    for arch in ("x86_64", "arm64"):
        run = _tables(path, "--arch", arch)
        elf = _tables("/bin/true", "--arch", arch)
        assert run.returncode == elf.returncode == 2 and run.stdout == ""
        assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
        assert "--arch selects a slice of a universal Mach-O file" in run.stderr and "PE file" in run.stderr
