"""The `analysis` source on a hand-built x86_64 process: frameless code, no tables.

    _start -> main (frame pointer) -> outer (sub rsp, 0x18; no frame pointer)
           -> leaf (push rbx; push r12; sub rsp, 8; clobbers rbx), stopped inside

The code bytes are checked against capstone's reading of them, then the
walk must give every caller's (pc, sp) as the layout dictates, with the
callee-saved registers leaf saved restored from their slots, and the
evidence must name the instruction behind each rule. Without symbols the
function starts come from the calls that reached them.
"""

import capstone
import pytest

from plugin.model.outcome import FailureKind
from plugin.strategies import analysis
from fallback_world import CODE, STACK_TOP, X86, World

SOURCES = ("analysis",)


def _rel32(at, target):
    return b"\xe8" + ((target - (at + 5)) & 0xFFFFFFFF).to_bytes(4, "little")


START, MAIN, OUTER, LEAF = CODE, CODE + 0x100, CODE + 0x200, CODE + 0x300
MAIN_CODE = lambda: b"\x55\x48\x89\xe5" + _rel32(MAIN + 4, OUTER) + b"\x5d\xc3"    # push rbp; mov; call; pop; ret
OUTER_CODE = lambda: b"\x48\x83\xec\x18" + _rel32(OUTER + 4, LEAF) + b"\x48\x83\xc4\x18\xc3"
LEAF_CODE = (b"\x53" b"\x41\x54" b"\x48\x83\xec\x08" b"\xbb\x01\x00\x00\x00" b"\x90"
             b"\x48\x83\xc4\x08" b"\x41\x5c" b"\x5b" b"\xc3")
LEAF_STOP = LEAF + 13          # the nop, after `mov ebx, 1`


def test_fixture_code_is_what_capstone_reads():
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    texts = [("%s %s" % (i[2], i[3])).strip() for i in cs.disasm_lite(LEAF_CODE, LEAF)]
    assert texts == ["push rbx", "push r12", "sub rsp, 8", "mov ebx, 1", "nop", "add rsp, 8", "pop r12",
                     "pop rbx", "ret"]
    texts = [("%s %s" % (i[2], i[3])).strip() for i in cs.disasm_lite(OUTER_CODE(), OUTER)]
    assert texts == ["sub rsp, 0x18", "call 0x%x" % LEAF, "add rsp, 0x18", "ret"]


def world(symbols=True):
    w = World(X86)
    w.put_code(START, b"\x90" * 0x10 + _rel32(START + 0x10, MAIN) + b"\xf4")
    w.put_code(MAIN, MAIN_CODE())
    w.put_code(OUTER, OUTER_CODE())
    w.put_code(LEAF, LEAF_CODE)
    if symbols:
        for name, start in (("_start", START), ("main", MAIN), ("outer", OUTER), ("leaf", LEAF)):
            w.symbols.append((start, start + 0x100, name))
    # The stack, from _start's frame down.
    main_cfa = STACK_TOP - 0x100
    w.word(main_cfa - 8, START + 0x15)               # return address into _start
    w.word(main_cfa - 16, 0)                         # main's push rbp: _start's rbp (0)
    main_rbp = main_cfa - 16
    outer_cfa = main_cfa - 16                        # main's sp at its call
    w.word(outer_cfa - 8, MAIN + 9)
    leaf_cfa = outer_cfa - 8 - 0x18
    w.word(leaf_cfa - 8, OUTER + 9)
    w.word(leaf_cfa - 16, 0x1111)                    # outer's rbx, saved by leaf
    w.word(leaf_cfa - 24, 0x2222)                    # outer's r12
    sp = leaf_cfa - 32
    regs = w.registers(pc=LEAF_STOP, sp=sp, fp=main_rbp, rbx=1, r12=0x2222)
    truth = [(OUTER + 9, leaf_cfa), (MAIN + 9, outer_cfa), (START + 0x15, main_cfa)]
    return w, regs, truth, leaf_cfa


def test_frameless_code_is_unwound_from_its_instructions():
    w, regs, truth, leaf_cfa = world()
    bt = w.unwind(regs, sources=SOURCES, max_frames=4)
    assert [(f.pc, f.registers[X86.sp]) for f in bt.frames[1:]] == truth
    assert [f.method for f in bt.frames[1:]] == ["analysis"] * 3
    outer = bt.frames[1]
    assert outer.registers[3] == 0x1111 and outer.registers[12] == 0x2222    # rbx, r12 from their slots
    evidence = outer.evidence
    # r12 was saved but still holds the caller's value: no rule needed (unchanged).
    assert evidence.row == "CFA=rsp+32 => rbx=[CFA-16] rip=[CFA-8]"
    assert evidence.entry["start_by"] == "symbol" and evidence.entry["function"] == "leaf"
    assert "CFA=rsp+32: set by 0x%x `sub rsp, 8`" % (LEAF + 3) in evidence.notes
    assert "rbx=[CFA-16]: saved by 0x%x `push rbx`" % LEAF in evidence.notes
    # The caller of outer is read at the state before its call: CFA = rsp + 0x20.
    assert bt.frames[2].evidence.row.startswith("CFA=rsp+32")


def test_without_symbols_the_start_is_the_call_that_reached_the_function():
    w, regs, truth, _ = world(symbols=False)
    bt = w.unwind(regs, sources=SOURCES, max_frames=4)
    assert [(f.pc, f.registers[X86.sp]) for f in bt.frames[1:]] == truth
    first = bt.frames[1].evidence
    assert first.entry["start_by"] == "call" and first.entry["start"] == LEAF
    assert any("target of the call before the return address 0x%x" % (OUTER + 9) in n for n in first.notes)


def test_a_register_changed_and_not_saved_is_unknown_in_the_caller():
    w, regs, _, _ = world()
    w.put_code(LEAF, b"\x90" + b"\x90\x90" + LEAF_CODE[3:])      # no push rbx / push r12
    regs[X86.sp] += 16
    bt = w.unwind(regs, sources=SOURCES, max_frames=2)
    outer = bt.frames[1]
    assert 3 not in outer.registers                  # rbx: changed by `mov ebx, 1`, never saved
    assert any(n.startswith("rbx=undefined: changed by 0x%x `mov ebx, 1`" % (LEAF + 7)) for n in outer.evidence.notes)


def test_an_unknown_stack_adjustment_is_undecided_and_the_next_source_answers():
    w, regs, truth, _ = world()
    w.put_code(LEAF + 3, b"\x48\x29\xc4")            # sub rsp, rax: by an unknown amount
    bt = w.unwind(regs, sources=("analysis", "scan"), max_frames=2)
    attempt = bt.frames[1].attempts[0]
    assert attempt.source == "analysis" and attempt.kind == FailureKind.UNDECIDED
    assert "CFA is unknown" in attempt.reason
    assert bt.frames[1].method == "scan"


def test_a_call_through_a_null_pointer_is_left_to_the_frame_pointer_edge_rule():
    w, regs, truth, leaf_cfa = world()
    regs[X86.pc] = 0
    regs[X86.sp] = leaf_cfa - 8                       # the call pushed outer's return address, then jumped to 0
    bt = w.unwind(regs, sources=("analysis", "frame-pointer"), max_frames=2)
    assert (bt.frames[1].pc, bt.frames[1].registers[X86.sp]) == truth[0]
    assert bt.frames[1].method == "frame-pointer"
    assert bt.frames[1].attempts[0].source == "analysis" and bt.frames[1].attempts[0].kind == FailureKind.NO_ENTRY


def test_no_start_is_not_applicable():
    w, regs, _, _ = world(symbols=False)
    regs[X86.sp] = STACK_TOP - 0x8                    # nothing on the stack above: no call reached it
    ctx = w.context(sources=SOURCES)
    from plugin.model.evidence import Frame
    outcome = analysis.step(Frame(0, LEAF_STOP, regs, "context", exact_pc=True), ctx)
    # No call reached it; main's prologue, the nearest below, is tried and does not reach the pc.
    assert outcome.kind == FailureKind.UNDECIDED, outcome.reason
    assert outcome.reason.startswith("from 0x%x (prologue): 0x%x is not reached from the start; " % (MAIN, LEAF_STOP))
    # The start is unknown, so the code is read forward from the pc: its return's slot is past the stack.
    assert "read forward from 0x%x instead: the row of the paths does not apply" % LEAF_STOP in outcome.reason
    w.put_code(MAIN, b"\x90" * 4)
    outcome = analysis.step(Frame(0, LEAF_STOP, regs, "context", exact_pc=True), w.context(sources=SOURCES))
    assert outcome.kind == FailureKind.NO_ENTRY and "start of the function" in outcome.reason


@pytest.mark.parametrize("symbols", [True, False])
def test_default_sources_put_analysis_before_the_guesses(symbols):
    from plugin import engine
    order = engine.DEFAULT_SOURCES
    assert order.index("analysis") < order.index("frame-pointer") < order.index("scan")
    w, regs, truth, _ = world(symbols)
    bt = w.unwind(regs, sources=("analysis", "frame-pointer", "scan"), max_frames=4)
    assert [(f.pc, f.registers[X86.sp]) for f in bt.frames[1:]] == truth
