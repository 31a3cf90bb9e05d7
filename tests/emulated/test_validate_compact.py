"""Compact unwind checked by `validate`: offline against the instructions, live in Unicorn.

tests/fixtures/macho/validate_compact.S, built with clang-16 and ld64.lld-16,
plants two wrong compact opcodes (clang's assembler derives them from the
CFI directives): a STACK_IMMD stack size 16 bytes too big, and a register
permutation with rbx and r12 swapped; -DCORRECT is the correct twin. An
opcode describes a function's body, so it is judged where it claims to be
exact: at calls (where callers are stopped), and the ABI's rule at the
entry and at returns. The oracle for where the planted errors show is
llvm-objdump-16's disassembly (the call instructions of the two
functions) and llvm-objdump-16 --unwind-info's encodings; the live truth is
the emulator's registers at each function's entry.
"""

import re

import pytest

from compact_support import FLAGS, build_macho, symbols
from support import need_tool, run
from validate_support import validate
from validate_unicorn import validate_call

PLANTED = {"frameless": ("cfa", "return address", "rbx"), "swapped": ("rbx", "r12")}


def calls_in(path):
    """{function: [offset of each call from the function's start]}, from llvm-objdump-16 -d."""
    out = run([need_tool("llvm-objdump-16"), "-d", "--no-show-raw-insn", str(path)]).stdout
    found, function, start = {}, None, 0
    for line in out.splitlines():
        head = re.match(r"^([0-9a-f]+) <_(\w+)>:$", line)
        if head:
            start, function = int(head.group(1), 16), head.group(2)
            found[function] = []
            continue
        insn = re.match(r"^\s+([0-9a-f]+):\s+call", line)
        if insn and function:
            found[function].append(int(insn.group(1), 16) - start)
    return found


def encodings(path):
    out = run([need_tool("llvm-objdump-16"), "--macho", "--unwind-info", str(path)]).stdout
    return re.findall(r"encoding\[\d+\]=(0x[0-9a-f]+)", out)


@pytest.fixture(scope="module")
def builds():
    return {variant: build_macho("validate_compact.S", "x86_64", flags)[0]
            for variant, flags in (("planted", []), ("twin", ["-DCORRECT"]))}


def _offsets(report, source, starts):
    """{function: sorted offsets of the wrong instructions} from an offline report."""
    out = {}
    for d in report["disagreements"]:
        if d["source"] == source:
            name = d["function"].split("+")[0]
            out.setdefault(name, []).append(d["address"] - starts[name])
    return {k: sorted(v) for k, v in out.items()}


def test_the_planted_opcodes_differ_from_the_twin_only_where_planted(builds):
    planted, twin = encodings(builds["planted"]), encodings(builds["twin"])
    assert len(planted) == len(twin) == 3
    assert [a == b for a, b in zip(planted, twin)] == [True, False, False]


def test_offline_finds_each_planted_opcode_at_its_call_and_nothing_in_the_twin(builds):
    calls = calls_in(builds["planted"])
    report = validate(builds["planted"])
    assert _offsets(report, "compact", symbols(builds["planted"])) == {name: calls[name] for name in PLANTED}
    items = {d["function"]: [i["item"] for i in d["items"]] for d in report["disagreements"]}
    assert items == {"frameless": ["cfa"], "swapped": ["rbx", "r12"]}     # a wrong CFA is judged first
    twin = validate(builds["twin"])
    assert twin["disagreements"] == [] and twin["unknown"] == 0
    assert twin["sources"]["compact"]["right"] == twin["sources"]["compact"]["checked"] >= 6


@pytest.mark.parametrize("function", sorted(PLANTED))
def test_live_in_unicorn_agrees_with_offline(builds, function):
    calls = calls_in(builds["planted"])
    data, text = validate_call(builds["planted"], function)
    assert data["complete"]
    wrong = [w for w in data["wrong"] if w["source"] == "compact"]
    assert [w["address"] - data["entry"] for w in wrong] == calls[function]
    assert {i["item"] for w in wrong for i in w["items"]} == set(PLANTED[function])
    assert "wrong at +0x%x" % calls[function][0] in text
    twin, _ = validate_call(builds["twin"], function)
    assert twin["complete"] and twin["wrong"] == []
    assert twin["sources"]["compact"]["right"] == 2 + len(calls[function])     # entry, calls, ret


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_clang_compact_opcodes_of_real_code_are_right(arch):
    """clang's own opcodes for unwind_shapes.c (frameless, frame pointer, big frames, many saves)."""
    path, _ = build_macho("unwind_shapes.c", arch, FLAGS["O2-nofp"])
    report = validate(path)
    compact = report["sources"]["compact"]
    assert report["unknown"] == 0 and compact["checked"] >= 5
    assert compact["wrong"] == 0 and compact["unknown"] == 0
