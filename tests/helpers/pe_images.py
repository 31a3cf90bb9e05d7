"""Build small PE images with clang-16 and lld-link-16 (tests/fixtures/pe/), and read
`llvm-readobj-16 --unwind`'s x64 output back as records to compare with."""
from __future__ import annotations

import os
import re
import subprocess

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
