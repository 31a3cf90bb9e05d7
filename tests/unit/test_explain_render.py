"""The explain renderer: one spelling of rows for every source, readable expressions, wrapping."""

import pytest

from plugin.arch import x86_64
from plugin.commands.catalog import BACKTRACE, EXPLAIN
from plugin.commands.options import parse_gdb
from plugin.engine import DEFAULT_SOURCES
from plugin.formats.dwarf_expr import disassemble
from plugin.model.evidence import Attempt, Backtrace, Frame, Read, StepEvidence
from plugin.model.outcome import AttemptStatus
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.render import explain
from plugin.render.expression import cfa_text, readable, row_rules, rule_text

ARCH = x86_64.ARCH
RSP_160_DEREF = bytes([0x77, 0xa0, 0x01, 0x06])      # DW_OP_breg7 (rsp) +160; DW_OP_deref


@pytest.mark.parametrize("ops, text", [
    (RSP_160_DEREF, "*(rsp+160)"),
    (bytes([0x77, 0x90, 0x01]), "rsp+144"),
    (bytes([0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x28, 0x03, 0x00]), None),  # a branch: not guessed
    (bytes([0x9c, 0x23, 0x10]), "CFA+16"),
    (bytes([0x76, 0x00, 0x06, 0x38, 0x22]), "*(rbp)+8"),
    (bytes([0x77, 0x00, 0x77, 0x00, 0x1e]), "(rsp * rsp)"),
    (bytes([0x06]), None),                           # stack underflow: not expressible
])
def test_readable_expressions(ops, text):
    assert readable(ops, ARCH) == text


def test_every_source_spells_a_dereferenced_cfa_the_same_way():
    sframe_flex = CfaRule(CfaKind.REGISTER, register=7, offset=160, deref=True)
    dwarf = CfaRule(CfaKind.EXPRESSION, expression=RSP_160_DEREF)
    assert cfa_text(sframe_flex, ARCH) == cfa_text(dwarf, ARCH) == "*(rsp+160)"
    assert cfa_text(dwarf, ARCH, verbose=True) == "*(rsp+160) {%s}" % disassemble(RSP_160_DEREF, ARCH)


def test_rules_and_row_order():
    row = Row(0x1000, CfaRule(CfaKind.REGISTER, register=7, offset=16),
              {3: Rule(RuleKind.OFFSET, -16), 16: Rule(RuleKind.OFFSET, -8), 6: Rule(RuleKind.SAME),
               12: Rule(RuleKind.EXPRESSION, expression=bytes([0x77, 0x10]))})
    assert row_rules(row, ARCH) == ["CFA = rsp+16", "rip = [CFA-8]", "rbx = [CFA-16]", "rbp = unchanged",
                                    "r12 = [rsp+16]"]
    assert rule_text(Rule(RuleKind.VAL_OFFSET, 8), ARCH) == "CFA+8"


def _frames():
    callee = Frame(level=3, pc=0x401000, registers={7: 0x7000}, method="context", function="raise", module="libc.so.6")
    row = Row(0x400ff0, CfaRule(CfaKind.REGISTER, register=7, offset=16), {16: Rule(RuleKind.OFFSET, -8),
                                                                          3: Rule(RuleKind.OFFSET, -16)}, end=0x401010)
    ev = StepEvidence(source="cfi", found_by=".eh_frame CFI", lookup_pc=0x400fff, module="libc.so.6",
                      section=".eh_frame", section_address=0x500000, entry={"fde_offset": 0x20, "row_start": 1},
                      rule=row, arch=ARCH, cfa=0x7010,
                      reads=[Read("rbx", 0x7000, 8, 5), Read("rip", 0x7008, 8, 0x402000)])
    caller = Frame(level=4, pc=0x402000, registers={}, method="cfi", function="by_value", module="demo",
                   evidence=ev, attempts=[Attempt("sframe", AttemptStatus.NOT_APPLICABLE, "no .sframe"),
                                          Attempt("compact", AttemptStatus.NOT_APPLICABLE, "not Mach-O")],
                   native={"available": True, "agrees": True, "pc": 0x402000, "sp": 0x7010})
    return [callee, caller]


def test_explain_reads_top_down():
    frames = _frames()
    text = explain.explain_frames_text(frames, frames[1:], ARCH)
    assert text.splitlines() == [
        "#4 by_value in demo: recovered from frame #3 (raise, libc.so.6) by .eh_frame CFI",
        "  trust: call frame info",
        "  pc 0x402000",
        "  table: .eh_frame of libc.so.6 at 0x500000, looked up at 0x400fff",
        "  entry: fde offset 0x20",
        "  row in force from 0x400ff0 to 0x401010:",
        "    CFA = rsp+16 = 0x7010 (frame #3's CFA)",
        "    rip = [CFA-8]   rbx = [CFA-16]",
        "  2 values read, in the row's order:",
        "    rip = 0x402000 from [0x7008] (8 bytes)",
        "    rbx = 0x5 from [0x7000] (8 bytes)",
        "  tried first: no entry for this pc in sframe, compact",
        "  verdict: the debugger's own unwinder agrees (pc 0x402000, sp 0x7010)",
    ]
    assert text.count("CFA =") == 1


def test_wrapping_and_stop_lines():
    frames = _frames()
    narrow = explain.explain_frames_text(frames, frames[1:], ARCH, width=40)
    assert max(len(line) for line in narrow.splitlines()) <= 40
    bt = Backtrace(frames, "no-unwind-info", "cfi: x; compact: not Mach-O",
                   [Attempt("cfi", AttemptStatus.FAILED, "cannot read 8 bytes at 0x0"),
                    Attempt("compact", AttemptStatus.NOT_APPLICABLE, "not a Mach-O module")])
    lines = explain.stop_text(bt).splitlines()
    assert lines[0].startswith("Backtrace stopped: no-unwind-info (")
    assert lines[1:] == ["  cfi failed: cannot read 8 bytes at 0x0", "  no entry for this pc in compact"]


def test_gdb_options_abbreviate():
    assert parse_gdb(EXPLAIN, ["-j", "-v", "2"], DEFAULT_SOURCES).json is True
    assert parse_gdb(EXPLAIN, ["-verb"], DEFAULT_SOURCES).verbose is True
    assert parse_gdb(BACKTRACE, ["-s", "cfi"], DEFAULT_SOURCES).sources == ("cfi",)


def test_explain_lines_read_as_sentences():
    """A flag in an entry is named when set and left out when not; a frame read from the stack, not a
    module's table, says so; a level the debugger has no frame at says it has none."""
    frames = _frames()
    frame = frames[1]
    frame.evidence.entry = {"fde_index": 3, "signal_frame": False, "outermost": True}
    frame.native = {"available": False}
    lines = explain.explain_frames_text(frames, frames[1:], ARCH).splitlines()
    assert "  entry: fde index 0x3, outermost" in lines
    assert "  verdict: the debugger's own unwinder has no frame at this level" in lines
    frame.evidence.module, frame.evidence.section, frame.evidence.section_address = None, "the stack", 0x7000
    lines = explain.explain_frames_text(frames, frames[1:], ARCH).splitlines()
    assert "  read from: the stack at 0x7000, looked up at 0x400fff" in lines
    assert not any("?" in line for line in lines), lines


def test_a_tail_call_frame_is_named_after_its_own_module():
    """sort_scores (the program) tail-calls qsort (libc): its line says `from demo`, not libc's name."""
    from types import SimpleNamespace
    from plugin.commands.reports import _name_tail_call_modules
    from plugin.model.evidence import VirtualFrame, VirtualKind
    frame = _frames()[1]
    frame.module = "libc.so.6"
    frame.tail_calls = [VirtualFrame(frame.level + 1, VirtualKind.TAIL_CALL, 0x1234, "sort_scores")]
    frame.inline_frames = [VirtualFrame(frame.level - 1, VirtualKind.INLINE, frame.pc, "helper")]
    demo = SimpleNamespace(name="demo")
    _name_tail_call_modules(frame, SimpleNamespace(find=lambda pc: demo if pc == 0x1234 else None))
    assert " in sort_scores from demo  [tail call: " in explain.virtual_line(frame.tail_calls[0], frame)
    assert " in helper from libc.so.6  [inlined into " in explain.virtual_line(frame.inline_frames[0], frame)
