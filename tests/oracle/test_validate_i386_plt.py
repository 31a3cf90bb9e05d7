"""i386 calls through the PLT to a function of the same module that pops its arguments (`ret $4`).

A function returning a struct (or `__float128`) in memory pops the hidden
result pointer; its callers in a PIC library reach it through its PLT stub
(`jmp [ebx + slot]`, the slot's relocation naming it). The analysis decides
the stack adjustment from the callee's own returns: all agree, that amount;
they disagree, the stack pointer is not known after the call (undecided rows,
never a guess). The oracles: objdump (the call sites and the callee's
returns) and readelf -wF (GCC's table at the instruction after the call).
"""

import re
import subprocess
from pathlib import Path

import pytest

from support import build, need_tool
from validate_support import objdump_lines, readelf_cfa, validate, wrong

QUADMATH_I386 = Path("/usr/lib/gcc/x86_64-linux-gnu/12/32/libquadmath.so")    # gcc-12-multilib (tests/setup.sh)


@pytest.fixture(scope="module")
def library():
    # -fno-toplevel-reorder: the functions in source order, use_countdown before countdown
    return build("validate_plt_pops.c", ["-m32", "-O2", "-fPIC", "-shared", "-fno-toplevel-reorder"],
                 name="validate_plt_pops-i386", compiler=need_tool("gcc"))


def _after_call(path, caller, callee):
    """The addresses of caller's instructions from the one after `call <callee>` to its end."""
    lines = objdump_lines(path, caller)
    [call] = [i for i, (_, text) in enumerate(lines) if text.startswith("call") and "<%s>" % callee in text]
    return [address for address, _ in lines[call + 1:]]


def _verdicts(path, function):
    report = validate(path, "--function", function)
    [detail] = report["functions_detail"]
    return {line["address"]: line for line in detail["instructions"]}


def test_plt_callee_popping_its_hidden_pointer(library):
    make_big = objdump_lines(library, "make_big")
    assert [text for _, text in make_big if text.startswith("ret")] == ["ret    $0x4"]
    report = validate(library)
    assert wrong(report, "cfi") == []
    lines = _verdicts(library, "use_big")
    after = [a for a in _after_call(library, "use_big", "make_big@plt") if a in lines]
    assert len(after) >= 5
    for address in after:
        assert lines[address]["sources"]["cfi"]["verdict"] == "right", lines[address]
    # GCC's table after the call: 4 bytes fewer above esp than before it (the callee popped them)
    first = lines[after[0]]
    cfa = readelf_cfa(library, after[0])
    assert first["analysis"].startswith("CFA=%s " % cfa), (first, cfa)
    call = max(a for a in lines if a < after[0])
    before = int(readelf_cfa(library, call).split("+")[1])
    assert int(cfa.split("+")[1]) == before - 4


def test_plt_callee_whose_returns_disagree_leaves_the_rows_after_undecided(library):
    mixed = objdump_lines(library, "mixed_pops")
    assert sorted(text for _, text in mixed if text.startswith("ret")) == ["ret", "ret    $0x4"]
    lines = _verdicts(library, "use_mixed")
    after = {a for a in _after_call(library, "use_mixed", "mixed_pops@plt") if a in lines}
    verdicts = {a: line["sources"]["cfi"]["verdict"] for a, line in lines.items()}
    assert after and all(verdicts[a] == "unknown" for a in after), verdicts
    assert all(v == "right" for a, v in verdicts.items() if a not in after), verdicts


def test_recursive_callee_popping_its_hidden_pointer(library):
    """countdown calls itself (`ret $4` both ways out), and use_countdown, placed before it, calls it
    first: countdown's own analysis is then running inside the decision on how it returns."""
    assert [text for _, text in objdump_lines(library, "countdown") if text.startswith("ret")] == ["ret    $0x4"] * 2
    names = subprocess.run([need_tool("nm"), str(library)], capture_output=True, text=True, check=True).stdout
    where = {line.split()[2]: int(line.split()[0], 16) for line in names.splitlines() if len(line.split()) == 3}
    assert where["use_countdown"] < where["countdown"]
    report = validate(library, "--jobs", "1")
    assert wrong(report, "cfi") == []
    lines = _verdicts(library, "countdown")
    after = [a for a in _after_call(library, "countdown", "countdown") if a in lines]
    assert after and all(lines[a]["sources"]["cfi"]["verdict"] == "right" for a in after)
    assert int(readelf_cfa(library, after[0]).split("+")[1]) \
        == int(readelf_cfa(library, max(a for a in lines if a < after[0])).split("+")[1]) - 4


def test_i386_libquadmath_plt_calls_to_its_own_float128_functions():
    """GCC 12's i386 libquadmath (32,875 wrong rows when these callees were taken to pop nothing):
    no wrong row; undecided only the `ret` of the pc thunks (mov REG, [esp]; ret) that load a
    callee-saved register and have an FDE, whose row keeps the register the thunk overwrote (as
    tests/oracle/test_i386_validate.py explains): ebp, esi and edi's (ebx's has no FDE)."""
    report = validate(QUADMATH_I386)
    cfi = report["sources"]["cfi"]
    assert cfi["wrong"] == 0 and cfi["checked"] > 100000, cfi
    assert report["unknown"] == 0, report["unknown"]
    out = subprocess.run([need_tool("objdump"), "-d", "--no-show-raw-insn", str(QUADMATH_I386)],
                         capture_output=True, text=True, check=True).stdout
    thunks = re.findall(r"^\s*([0-9a-f]+):\s*mov\s+\(%esp\),%(e[a-z]{2})\n\s*([0-9a-f]+):\s*ret\s*$", out, re.M)
    frames = subprocess.run([need_tool("readelf"), "-wf", str(QUADMATH_I386)], capture_output=True, text=True,
                            check=True).stdout
    covered = [(int(lo, 16), int(hi, 16)) for lo, hi in re.findall(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", frames)]
    expected = sorted(int(ret, 16) for load, register, ret in thunks if register in ("ebx", "ebp", "esi", "edi")
                      and any(lo <= int(load, 16) < hi for lo, hi in covered))
    assert len(expected) == cfi["unknown"] == 3, (thunks, cfi)
    for address in expected:
        [function] = validate(QUADMATH_I386, "--address", hex(address))["functions_detail"]
        undecided = [line["address"] for line in function["instructions"]
                     if line["sources"]["cfi"]["verdict"] == "unknown"]
        assert undecided == [address]
