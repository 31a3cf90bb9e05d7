"""Build small PE images with clang-16 and lld-link-16 (tests/fixtures/pe/), and read
`llvm-readobj-16 --unwind`'s x64 output back as records to compare with."""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "pe")
X64 = "x86_64-pc-windows-msvc"


def build(source: str, out_dir: str, target: str = X64, opt: str = "-O2", dll: bool = False,
          link_flags: tuple = (), suffix: str = "") -> str:
    """The linked image of one fixture source (C or assembly)."""
    src = os.path.join(FIXTURES, source)
    stem = os.path.join(out_dir, "%s%s%s" % (os.path.splitext(source)[0], opt, suffix))
    subprocess.run(["clang-16", "--target=" + target, opt, "-c", src, "-o", stem + ".obj"],
                   check=True)
    link = ["lld-link-16", "/nodefaultlib", "/debug:symtab", *link_flags, stem + ".obj"]
    link += ["/dll", "/noentry", "/out:%s.dll" % stem] if dll else \
        ["/entry:start", "/subsystem:console", "/out:%s.exe" % stem]
    subprocess.run(link, check=True)
    return stem + (".dll" if dll else ".exe")


def _num(text: str) -> int:
    return int(re.search(r"\(0x([0-9A-Fa-f]+)\)", text).group(1), 16)


def readobj_x64(path: str) -> list:
    """Each RuntimeFunction as a dict: begin, end, unwind (absolute addresses) and the
    list of its UnwindInfo dicts (version, flags, prolog, frame_register, frame_offset_field,
    count, codes as (offset, text) and chained as (begin, end, unwind))."""
    out = subprocess.run(["llvm-readobj-16", "--unwind", path], check=True,
                         capture_output=True, text=True).stdout
    functions = []
    info = None
    in_chain = False
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("RuntimeFunction {"):
            functions.append({"infos": []})
            in_chain = False
        elif s.startswith("UnwindInfo {"):
            info = {"codes": [], "chained": None, "frame_register": 0, "frame_offset_field": 0}
            functions[-1]["infos"].append(info)
        elif s.startswith("Chained {"):
            in_chain = True
            info["chained"] = []
        elif s.startswith(("StartAddress:", "EndAddress:", "UnwindInfoAddress:")):
            if in_chain:
                info["chained"].append(_num(s))
            else:
                functions[-1][s.split(":")[0]] = _num(s)
        elif s.startswith("Version:"):
            info["version"] = int(s.split()[1])
        elif s.startswith("Flags ["):
            info["flags"] = _num(s)
        elif s.startswith("PrologSize:"):
            info["prolog"] = int(s.split()[1])
        elif s.startswith("FrameRegister:") and s != "FrameRegister: -":
            info["frame_register"] = _num(s)
        elif s.startswith("FrameOffset:") and s != "FrameOffset: -":
            info["frame_offset_field"] = int(s.split()[1], 16)
        elif s.startswith("UnwindCodeCount:"):
            info["count"] = int(s.split()[1])
        elif re.match(r"0x[0-9A-F]{2}: ", s):
            info["codes"].append((int(s[:4], 16), s[6:]))
        elif s.startswith("Handler:"):
            info["handler"] = _num(s)
    return functions


def readobj_arm64(path: str) -> list:
    """Each ARM64 RuntimeFunction as a dict of llvm-readobj's fields: Function, and either
    the packed ones (Fragment, FunctionLength, RegF, RegI, HomedParameters, CR, FrameSize)
    or ExceptionRecord and the .xdata ones, with "prologue" (opcode hex strings) and
    "scopes" ([StartOffset, EpilogueStartIndex, [opcode hex strings]])."""
    out = subprocess.run(["llvm-readobj-16", "--unwind", path], check=True,
                         capture_output=True, text=True).stdout
    functions = []
    where = None
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("RuntimeFunction {"):
            functions.append({"prologue": [], "scopes": []})
            where = None
        elif s.startswith("Function:"):
            functions[-1]["Function"] = int(re.search(r"0x([0-9A-F]+)", s.split(":", 1)[1])
                                            .group(1), 16)
        elif s.startswith("ExceptionRecord:"):
            functions[-1]["ExceptionRecord"] = int(s.split()[1], 16)
        elif s.startswith("Prologue ["):
            where = functions[-1]["prologue"]
        elif s.startswith("EpilogueScope {"):
            functions[-1]["scopes"].append([None, None, []])
        elif s.startswith("StartOffset:"):
            functions[-1]["scopes"][-1][0] = int(s.split()[1])
        elif s.startswith("EpilogueStartIndex:"):
            functions[-1]["scopes"][-1][1] = int(s.split()[1])
        elif s.startswith("Opcodes ["):
            where = functions[-1]["scopes"][-1][2]
        elif s.startswith("Epilogue ["):
            where = functions[-1].setdefault("epilogue", [])
        elif re.match(r"0x[0-9a-f]+ +;", s) and where is not None:
            where.append(s.split()[0][2:])
        elif re.match(r"[A-Za-z]+: ", s) and functions:
            key, value = s.split(":", 1)
            functions[-1].setdefault(key, value.strip())
    return functions


# The live tests (tests/gdb/test_pdata_live_gdb.py, tests/lldb/test_pdata_live_lldb.py):
# tests/fixtures/pe_host.c maps x64_live.c's DLL and calls in; the known call chain.
CHAIN = ["stop_here", "callback", "pe_big", "pe_saves", "pe_frame", "pe_entry", "call_into_pe", "main"]
PE_FUNCTIONS = ("pe_big", "pe_saves", "pe_frame", "pe_entry")


def build_live(out_dir: str) -> dict:
    """The live DLL for each of pe_host's modes: copied (any file alignment) and mapped per
    section (file alignment = page size)."""
    return {"copy": build("x64_live.c", out_dir, dll=True),
            "map": build("x64_live.c", out_dir, dll=True, link_flags=("/filealign:4096",), suffix="-map")}


@dataclass
class LiveRun:
    """One run of tests/fixtures/pe_host.c with the live DLL: the image, the host program, the
    image's symbols (llvm-nm) and the host's arguments (the DLL, pe_entry's RVA, the mode)."""
    dll: str
    host: str
    symbols: dict
    args: list


def live_run(images: dict, mode: str) -> LiveRun:
    """The set-up both live tests share (images: build_live's; mode: "copy" or "map")."""
    from support import build as build_host
    dll = images[mode]
    symbols = nm_symbols(dll)
    return LiveRun(dll, build_host("pe_host.c", ["-O1"]), symbols,
                   [dll, hex(symbols["pe_entry"] - image_base(dll)), mode])


def readobj_entry(path: str, start: int) -> dict:
    """llvm-readobj-16 --unwind's RuntimeFunction starting at `start`."""
    [found] = [f for f in readobj_x64(path) if f["StartAddress"] == start]
    return found


def nm_symbols(path: str) -> dict:
    """name -> absolute address, from llvm-nm-16 (the image's COFF symbol table)."""
    out = subprocess.run(["llvm-nm-16", path], check=True, capture_output=True, text=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3}


def objdump_calls(path: str) -> dict:
    """return address -> call target ("*" for an indirect call), from llvm-objdump-16 -d."""
    out = subprocess.run(["llvm-objdump-16", "-d", "--no-show-raw-insn", path], check=True,
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


def image_base(path: str) -> int:
    out = subprocess.run(["llvm-readobj-16", "--file-headers", path], check=True, capture_output=True,
                         text=True).stdout
    return int(re.search(r"ImageBase: 0x([0-9A-F]+)", out).group(1), 16)


def module_line(path: str, mode: str):
    """`unwind modules`' line for the image: named after its file when mapped from it."""
    name = os.path.basename(path) if mode == "map" else "PE image"
    return re.compile(r"%s at 0x%x" % (re.escape(name), image_base(path)))


def check_live_walk(walk: list, path: str) -> None:
    """The plugin's walk (unwind backtrace JSON frames) from stop_here follows CHAIN: each PE
    frame's pc follows a call (llvm-objdump) to the function below it (the callback's is
    indirect) and lies in the function llvm-nm and llvm-readobj --unwind name; the frames
    whose callee is a PE function were recovered by pdata."""
    assert len(walk) >= len(CHAIN), walk
    symbols = nm_symbols(path)
    exported = exports(path)
    assert exported, path       # pe_entry is __declspec(dllexport)
    ranges = {(fn["StartAddress"], fn["EndAddress"]) for fn in readobj_x64(path)}
    calls = objdump_calls(path)
    for level, name in enumerate(CHAIN):
        frame = walk[level]
        if name in PE_FUNCTIONS:
            start = symbols[name]
            assert any(lo == start and lo <= frame["pc"] - 1 < hi for lo, hi in ranges), (level, frame)
            callee = CHAIN[level - 1]
            target = calls.get(frame["pc"])
            assert target == ("*" if callee == "callback" else symbols[callee]), (level, hex(frame["pc"]), target)
            # named from the export directory in memory where the function is exported, else unnamed
            assert frame["function"] == (name if name in exported else None), (level, frame, exported)
        else:
            assert frame["function"] == name, (level, frame)
    for level in range(3, 7):
        assert walk[level]["method"] == "pdata", walk[level]


def exports(path: str) -> set:
    """The names `llvm-readobj-16 --coff-exports` lists for an image."""
    out = subprocess.run(["llvm-readobj-16", "--coff-exports", path], check=True, capture_output=True,
                         text=True).stdout
    return set(re.findall(r"^\s*Name: (\S+)$", out, re.M))
