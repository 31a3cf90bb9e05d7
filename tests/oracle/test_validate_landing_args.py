"""A landing pad reached from a call with pushed arguments (DW_CFA_GNU_args_size).

clang (and rustc, GCC at -m32) push stack arguments with `push` and say how
many bytes are still pushed at each call with DW_CFA_GNU_args_size. When
an exception lands, the unwinder resumes the pad with the stack pointer of
the call plus that amount (libgcc's uw_install_context_1), so the pad runs
with the arguments popped, at the frame's usual level, and the table's row
there says so. The analysis used to enter the pad with the call's own
stack pointer: 5 false "wrong" rows here (2,999 such rows in librsvg).
Oracles: readelf -wf (the args_size at the calls), readelf -wF (the CFA at
the pad), objdump (where the pad is: the instruction after the `ret`).
"""

import re
import subprocess

import pytest

from support import build, need_tool
from validate_support import validate, wrong


@pytest.fixture(scope="module")
def library():
    return build("validate_landing_args.cpp", ["-O2", "-fPIC", "-shared"], name="validate_landing_args",
                 compiler=need_tool("clang++-16"))


def _lines(path):
    out = subprocess.run([need_tool("objdump"), "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True, check=True).stdout
    body = out.split("<_Z7use_padl>:\n", 1)[1].split("\n\n", 1)[0]
    return [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"^\s*([0-9a-f]+):\s*(.*)$", body, re.M)]


def _readelf_cfa(path, address):
    out = subprocess.run([need_tool("readelf"), "-wF", str(path)], capture_output=True, text=True,
                         check=True).stdout
    found = None
    for fde in out.split("FDE ")[1:]:
        m = re.search(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", fde)
        if m and int(m.group(1), 16) <= address < int(m.group(2), 16):
            for row in re.finditer(r"^([0-9a-f]{16}) ([a-z]+[+-][0-9]+) ", fde, re.M):
                if int(row.group(1), 16) <= address:
                    found = row.group(2)
    return found


def test_pad_entered_with_the_arguments_popped(library):
    frames = subprocess.run([need_tool("readelf"), "-wf", str(library)], capture_output=True, text=True,
                            check=True).stdout
    assert "DW_CFA_GNU_args_size: 16" in frames         # the case: arguments pushed at a call that may throw
    lines = _lines(library)
    pushes = [text for _, text in lines if text.startswith("push") and "$0x" in text]
    assert len(pushes) >= 2
    ret = [i for i, (_, text) in enumerate(lines) if text.startswith("ret")][0]
    pad = lines[ret + 1][0]                             # the code after the return: the landing pad
    report = validate(library, "--function", "_Z7use_padl")
    [detail] = report["functions_detail"]
    at = {line["address"]: line for line in detail["instructions"]}
    assert wrong(report, "cfi") == []
    cfa = _readelf_cfa(library, pad)
    assert cfa == "rsp+32"
    assert at[pad]["sources"]["cfi"]["verdict"] == "right", at[pad]
    assert at[pad]["analysis"].startswith("CFA=%s " % cfa), at[pad]
    # every instruction of the pad's path is checked and right, up to the call that resumes the unwinding
    tail = [a for a, _ in lines if a >= pad]
    assert all(at[a]["sources"]["cfi"]["verdict"] == "right" for a in tail), [at[a] for a in tail]
