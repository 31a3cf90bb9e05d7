"""Forward analysis from the pc (plugin.analysis.forward) on hand-assembled code; capstone decodes.

Each case first checks capstone reads the bytes as the instructions named,
so the expected rows follow from those instructions' meaning.
"""

import capstone

from plugin.analysis import i386, x86_64
from plugin.analysis import forward
from plugin.analysis.ops import Flow
from plugin.model.rules import RuleKind

BASE = 0x1000


def run(facts, hexes, texts, known=None, **hooks):
    code = bytes.fromhex("".join(hexes))
    cs = capstone.Cs(getattr(capstone, facts.CAPSTONE[0]), getattr(capstone, facts.CAPSTONE[1]))
    assert [("%s %s" % (m, o)).strip() for _, _, m, o in cs.disasm_lite(code, BASE)] == texts

    def decode_at(address):
        offset = address - BASE
        if not 0 <= offset < len(code):
            return None
        for found in cs.disasm_lite(code[offset:offset + 16], address, 1):
            return facts.decode(*found)
        return None
    return forward.analyse(facts, BASE, known or {}, decode_at, **hooks)


def rules(found):
    return {n: (r.kind, r.offset if r.kind != RuleKind.REGISTER else r.register) for n, r in found.row.registers.items()}


def test_agreeing_paths_decide():
    found = run(i386, ["85c0", "7403", "5b", "5e", "c3", "5b", "5e", "c3"],
                ["test eax, eax", "je 0x1007", "pop ebx", "pop esi", "ret", "pop ebx", "pop esi", "ret"])
    assert found.row is not None, found.why
    assert (found.row.cfa.register, found.row.cfa.offset) == (4, 12)
    got = rules(found)
    assert got[8] == (RuleKind.OFFSET, -4)
    assert got[3] == (RuleKind.OFFSET, -12)       # pop ebx read the word at esp
    assert got[6] == (RuleKind.OFFSET, -8)
    assert 5 not in got and 7 not in got          # ebp and edi unchanged: same
    assert sorted(insn.address for insn in found.returns) == [0x1006, 0x1009]
    assert found.setters["cfa"].text == "pop esi"
    assert found.setters[3].text == "pop ebx"


def test_disagreeing_paths_are_undecided():
    found = run(i386, ["85c0", "7402", "5b", "c3", "5b", "5e", "c3"],
                ["test eax, eax", "je 0x1006", "pop ebx", "ret", "pop ebx", "pop esi", "ret"])
    assert found.row is None
    assert "leave different frames" in found.why


def test_loop_settles():
    found = run(i386, ["49", "75fd", "83c408", "c3"], ["dec ecx", "jne 0x1000", "add esp, 8", "ret"])
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 12
    assert found.setters["cfa"].text == "add esp, 8"


def test_loop_moving_the_stack_does_not_end():
    found = run(i386, ["53", "ebfd"], ["push ebx", "jmp 0x1000"])
    assert found.row is None
    assert "more than %d stack words" % forward.MAX_WRITTEN in found.why
    found = run(i386, ["83ec04", "ebfb"], ["sub esp, 4", "jmp 0x1000"])
    assert found.row is None
    assert "within %d instructions" % forward.MAX_INSTRUCTIONS in found.why


def test_indirect_jump_is_undecided():
    found = run(i386, ["5b", "ffe0"], ["pop ebx", "jmp eax"])
    assert found.row is None
    assert "jmp eax" in found.why


def test_leave_needs_the_frame_pointer_known_at_pc():
    texts = ["leave", "ret"]
    assert run(i386, ["c9", "c3"], texts).row is None
    found = run(i386, ["c9", "c3"], texts, known={5: 16})     # ebp = esp + 16 at pc
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 24
    assert rules(found)[5] == (RuleKind.OFFSET, -8)
    assert found.setters[5].text == "leave"
    kept = run(i386, ["5b", "c3"], ["pop ebx", "ret"], known={5: 16, 6: 32})
    assert 5 not in rules(kept) and 6 not in rules(kept)     # unchanged stack addresses: same
    moved = run(i386, ["89ee", "c3"], ["mov esi, ebp", "ret"], known={5: 16})
    assert rules(moved)[6] == (RuleKind.VAL_OFFSET, 16 - 4)  # esi = the pc's ebp = esp + 16 = CFA + 12


def test_ret_n():
    found = run(i386, ["5b", "c20800"], ["pop ebx", "ret 8"])
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 8 and rules(found)[3] == (RuleKind.OFFSET, -8)
    assert found.returns[0].popped == 8
    mixed = run(i386, ["85c0", "7403", "c20400", "c20800"], ["test eax, eax", "je 0x1007", "ret 4", "ret 8"])
    assert mixed.row is None and "different frames" in mixed.why


def test_call_returns_with_callee_saved_kept():
    found = run(i386, ["e810000000", "83c404", "c3"], ["call 0x1015", "add esp, 4", "ret"])
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 8
    # the call is followed by padding: its path ends; falling through to the `ret` would disagree
    padded = run(i386, ["85c0", "7407", "e811000000", "90", "c3", "5b", "c3"],
                 ["test eax, eax", "je 0x100b", "call 0x101a", "nop", "ret", "pop ebx", "ret"])
    assert padded.row is not None, padded.why
    assert padded.row.cfa.offset == 8 and [insn.address for insn in padded.returns] == [0x100c]
    never = run(i386, ["e810000000", "ffe0"], ["call 0x1015", "jmp eax"], noreturn=lambda insn: insn.flow == Flow.CALL)
    assert never.row is None and "no path" in never.why


def test_return_address_written_by_the_code_is_undecided():
    found = run(i386, ["50", "c3"], ["push eax", "ret"])
    assert found.row is None and "computed" in found.why


def test_register_moved_from_another():
    found = run(i386, ["89f3", "c3"], ["mov ebx, esi", "ret"])
    assert found.row is not None, found.why
    assert rules(found)[3] == (RuleKind.REGISTER, 6)


def test_x86_64():
    found = run(x86_64, ["4883c408", "5b", "c3"], ["add rsp, 8", "pop rbx", "ret"])
    assert found.row is not None, found.why
    assert (found.row.cfa.register, found.row.cfa.offset) == (7, 24)
    assert rules(found)[3] == (RuleKind.OFFSET, -16)
    assert rules(found)[16] == (RuleKind.OFFSET, -8)
    clobbered = run(x86_64, ["4889c3", "c3"], ["mov rbx, rax", "ret"])
    assert rules(clobbered)[3] == (RuleKind.UNDEFINED, 0)
