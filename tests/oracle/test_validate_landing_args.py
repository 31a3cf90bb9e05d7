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

import subprocess

import pytest

from support import build, need_tool
from validate_support import objdump_lines, readelf_cfa, validate, wrong


@pytest.fixture(scope="module")
def library():
    return build("validate_landing_args.cpp", ["-O2", "-fPIC", "-shared"], name="validate_landing_args",
                 compiler=need_tool("clang++-16"))


def test_pad_entered_with_the_arguments_popped(library):
    frames = subprocess.run([need_tool("readelf"), "-wf", str(library)], capture_output=True, text=True,
                            check=True).stdout
    assert "DW_CFA_GNU_args_size: 16" in frames         # the case: arguments pushed at a call that may throw
    lines = objdump_lines(library, "_Z7use_padl")
    pushes = [text for _, text in lines if text.startswith("push") and "$0x" in text]
    assert len(pushes) >= 2
    ret = [i for i, (_, text) in enumerate(lines) if text.startswith("ret")][0]
    pad = lines[ret + 1][0]                             # the code after the return: the landing pad
    report = validate(library, "--function", "_Z7use_padl")
    [detail] = report["functions_detail"]
    at = {line["address"]: line for line in detail["instructions"]}
    assert wrong(report, "cfi") == []
    cfa = readelf_cfa(library, pad)
    assert cfa == "rsp+32"
    assert at[pad]["sources"]["cfi"]["verdict"] == "right", at[pad]
    assert at[pad]["analysis"].startswith("CFA=%s " % cfa), at[pad]
    # every instruction of the pad's path is checked and right, up to the call that resumes the unwinding
    tail = [a for a, _ in lines if a >= pad]
    assert all(at[a]["sources"]["cfi"]["verdict"] == "right" for a in tail), [at[a] for a in tail]
