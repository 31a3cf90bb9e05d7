"""The model of GDB 13's amd64 prologue unwinder (Arch.debugger_prologue_row) and the
neighbouring-table start's pieces (padding, the entry ending below a pc), on bytes written here.
The model is checked against GDB itself in tests/gdb/test_heuristic_yield.py."""

import pytest

from plugin.analysis import aarch64 as a64_facts
from plugin.analysis import x86_64 as x64_facts
from plugin.arch.aarch64 import ARCH as AARCH64
from plugin.arch.x86_64 import ARCH
from plugin.strategies.function_start import _entry_below

FRAMED = b"\x55\x48\x89\xe5\x48\x83\xec\x10"          # push %rbp; mov %rsp,%rbp; sub $16,%rsp
FRAMED_8B = b"\x55\x48\x8b\xec\x90\x90\x90\x90"       # push %rbp; mov %rsp,%rbp (8b form)
ENDBR_FRAMED = b"\xf3\x0f\x1e\xfa\x55\x48\x89\xe5"
PUSH_ONLY = b"\x55\x53\x48\x83\xec\x08\x90\x90"       # push %rbp; push %rbx; sub $8,%rsp
NO_PROLOGUE = b"\x53\x48\x83\xec\x10\x90\x90\x90"     # push %rbx; sub $16,%rsp
REALIGN = b"\x4c\x8d\x54\x24\x08\x48\x83\xe4"         # lea 8(%rsp),%r10; and $-N,%rsp


def _model(code, pc_offset, start=0x1000):
    read = lambda address, size: code[address - start:address - start + size] if address >= start else None
    return ARCH.debugger_prologue_row(read, start, start + pc_offset)


def _shape(model):
    row = model.row
    return (ARCH.name_of(row.cfa.register), row.cfa.offset,
            {ARCH.name_of(n): r.offset for n, r in sorted(row.registers.items())})


@pytest.mark.parametrize("code, offset, expected", [
    (FRAMED, 0, ("rsp", 8, {"rip": -8})),                          # at the start
    (FRAMED, 1, ("rsp", 16, {"rbp": -16, "rip": -8})),             # after push, at the mov
    (FRAMED, 4, ("rbp", 16, {"rbp": -16, "rip": -8})),             # after push; mov
    (FRAMED, 200, ("rbp", 16, {"rbp": -16, "rip": -8})),
    (FRAMED_8B, 200, ("rbp", 16, {"rbp": -16, "rip": -8})),
    (ENDBR_FRAMED, 4, ("rsp", 8, {"rip": -8})),                    # endbr64 skipped: at the push
    (ENDBR_FRAMED, 5, ("rsp", 16, {"rbp": -16, "rip": -8})),
    (ENDBR_FRAMED, 9, ("rbp", 16, {"rbp": -16, "rip": -8})),
    (PUSH_ONLY, 100, ("rsp", 16, {"rbp": -16, "rip": -8})),        # GDB counts the push, nothing after it
    (NO_PROLOGUE, 100, ("rsp", 8, {"rip": -8})),                   # no prologue: the return address at [rsp]
])
def test_gdb_amd64_prologue_rules(code, offset, expected):
    assert _shape(_model(code, offset)) == expected


def test_no_function_known_means_the_return_address_at_rsp():
    model = ARCH.debugger_prologue_row(lambda a, n: None, None, 0x1234)
    assert _shape(model) == ("rsp", 8, {"rip": -8})
    assert "no function is known" in model.why


def test_paths_not_modelled_give_none():
    assert _model(REALIGN, 40) is None                              # GDB's stack-realignment path
    assert ARCH.debugger_prologue_row(lambda a, n: None, 0x1000, 0x1010) is None   # unreadable code
    assert AARCH64.debugger_prologue_row(lambda a, n: b"\x00" * n, 0x1000, 0x1010) is None


@pytest.mark.parametrize("facts, text, padding", [
    (x64_facts, "nop", True), (x64_facts, "nop dword ptr [rax + rax]", True),
    (x64_facts, "nop word ptr cs:[rax + rax]", True), (x64_facts, "data16 nop word ptr cs:[rax + rax]", True),
    (x64_facts, "int3", True), (x64_facts, "xchg ax, ax", True), (x64_facts, "push rbp", False),
    (x64_facts, "add byte ptr [rax], al", False),
    (a64_facts, "nop", True), (a64_facts, "udf #0", True), (a64_facts, "udf #1", False),
    (a64_facts, "stp x29, x30, [sp, #-0x10]!", False),
])
def test_alignment_padding(facts, text, padding):
    assert facts.is_padding(text) is padding


def test_the_entry_ending_below_a_pc():
    ranges = [(0x100, 0x120, "a"), (0x130, 0x188, "b"), (0x200, 0x240, "c")]
    assert _entry_below(ranges, 0x190) == (0x188, "b")
    assert _entry_below(ranges, 0x188) == (0x188, "b")
    assert _entry_below(ranges, 0x150) is None                      # b covers it
    assert _entry_below(ranges, 0x80) is None                       # nothing below
    assert _entry_below(ranges, 0x300) == (0x240, "c")
