"""Forward analysis from the pc on 32-bit Arm and Thumb-2 code (issue 33, item 1).

The bytes were assembled by llvm-mc (thumbv7/armv7-linux-gnueabihf); each case first checks
capstone reads them as the instructions named, so the expected rows follow from their meaning.
"""

import capstone

from plugin.analysis import arm, forward
from plugin.model.rules import RuleKind

BASE = 0x1000
LR, SP = 14, 13


def run(hexes, texts, thumb=True, link=False, **hooks):
    code = bytes.fromhex("".join(hexes))
    cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
    assert [("%s %s" % (m, o)).strip() for _, _, m, o in cs.disasm_lite(code, BASE)] == texts
    decode = arm.decode_thumb if thumb else arm.decode
    # one linear sweep, as the plugin decodes Thumb code (capstone knows IT conditions only so)
    decoded = {found[0]: decode(*found) for found in cs.disasm_lite(code, BASE)}
    return forward.analyse(arm, BASE, {}, decoded.get, link=link, **hooks)


def rules(found):
    return {n: (r.kind, r.offset) for n, r in found.row.registers.items()}


def test_it_block_conditional_pop_agrees_with_the_final_pop():
    found = run(["0028", "08bf", "90bd", "0120", "90bd"],
                ["cmp r0, #0", "it eq", "popeq {r4, r7, pc}", "movs r0, #1", "pop {r4, r7, pc}"])
    assert found.row is not None, found.why
    assert (found.row.cfa.register, found.row.cfa.offset) == (SP, 12)
    assert rules(found) == {LR: (RuleKind.OFFSET, -4), 4: (RuleKind.OFFSET, -12), 7: (RuleKind.OFFSET, -8)}
    assert sorted(insn.address for insn in found.returns) == [0x1004, 0x1008]


def test_conditional_pop_and_a_deeper_pop_disagree():
    found = run(["0028", "08bf", "90bd", "02b0", "90bd"],
                ["cmp r0, #0", "it eq", "popeq {r4, r7, pc}", "add sp, #8", "pop {r4, r7, pc}"])
    assert found.row is None
    assert "leave different frames" in found.why


def test_bx_lr_after_lr_was_popped():
    found = run(["0020", "bde81040", "7047"], ["movs r0, #0", "pop.w {r4, lr}", "bx lr"])
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 8
    assert rules(found) == {LR: (RuleKind.OFFSET, -4), 4: (RuleKind.OFFSET, -8)}
    assert found.setters[4].text == "pop.w {r4, lr}"


def test_arm_ldr_pc_post_index():
    found = run(["04d08de2", "04f09de4"], ["add sp, sp, #4", "pop {pc}"], thumb=False)
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 8
    assert rules(found) == {LR: (RuleKind.OFFSET, -4)}


def test_leaf_bx_lr_only_in_the_innermost_frame():
    # innermost: lr at the pc is the return address, kept to `bx lr`
    found = run(["0130", "7047"], ["adds r0, #1", "bx lr"], link=True)
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 0
    assert rules(found) == {LR: (RuleKind.SAME, 0)}
    # a caller frame: its lr was overwritten by the call it made, so lr at the pc is unknown
    found = run(["0130", "7047"], ["adds r0, #1", "bx lr"])
    assert found.row is None and "returns to an address the code computed" in found.why


def test_a_call_clobbers_lr():
    found = run(["00f080f8", "7047"], ["bl #0x1104", "bx lr"], link=True)
    assert found.row is None and "returns to an address the code computed" in found.why


def test_a_jump_to_a_plt_stub_is_a_tail_call():
    texts = ["pop.w {r4, lr}", "b.w #0x2000"]
    found = run(["bde81040", "00f0fcbf"], texts, tail_call=lambda insn: insn.target == 0x2000)
    assert found.row is not None, found.why
    assert found.row.cfa.offset == 8
    assert rules(found) == {LR: (RuleKind.OFFSET, -4), 4: (RuleKind.OFFSET, -8)}
    assert [insn.text for insn in found.returns] == ["b.w #0x2000"]
    # not known to be another function's: the jump is followed, and nothing is there to read
    found = run(["bde81040", "00f0fcbf"], texts)
    assert found.row is None and "cannot decode" in found.why
