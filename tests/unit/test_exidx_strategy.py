"""EHABI opcodes turned into a Row and applied to registers and a stack built here."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from plugin.arch import arm
from plugin.errors import MemoryReadError
from plugin.formats.exidx import EntryKind, IndexEntry, Model, UnwindEntry
from plugin.formats.exidx_ops import decode_opcodes
from plugin.model.evidence import Frame, StepEvidence
from plugin.model.outcome import AttemptStatus
FAILED, RECOVERED = AttemptStatus.FAILED, AttemptStatus.RECOVERED
from plugin.strategies.exidx import apply, at_entry, plan

ARCH = arm.ARCH
SP_AT = 0x8000


class Ctx:
    """Just what apply() asks of the engine's context: the arch and memory."""

    def __init__(self, words):
        self.arch = ARCH
        self.memory = {SP_AT + 4 * i: w for i, w in enumerate(words)}

    def read_memory(self, address, size):
        if address not in self.memory:
            raise MemoryReadError(address, size)
        return struct.pack("<I", self.memory[address])


def unwind(hexbytes):
    entry = IndexEntry(0, 0, 0x1000, 0x1100, EntryKind.INLINE, 0)
    return UnwindEntry(entry, Model.COMPACT, personality_index=0, opcodes=bytes.fromhex(hexbytes),
                       instructions=decode_opcodes(bytes.fromhex(hexbytes), ".ARM.exidx", 0), decoded=True)


def run(hexbytes, words, registers=None, exact=False):
    regs = {13: SP_AT, 14: 0x2001, 7: SP_AT + 8, 11: SP_AT + 12, arm.CPSR: 0x60000010}
    regs.update(registers or {})
    steps = plan(unwind(hexbytes), ARCH, 0x1000, 0x1100)
    frame = Frame(level=0, pc=0x1010, registers=regs, method="context", exact_pc=exact)
    evidence = StepEvidence(source="exidx", found_by="test", lookup_pc=0x1010)
    return steps, apply(steps, frame, Ctx(words), evidence)


def test_add_and_pop_with_lr():
    # vsp += 8; pop {r4, r14}
    steps, out = run("01a8b0", [0, 0, 0x44, 0x3001])
    assert out.status == RECOVERED
    assert steps.row.text(ARCH) == "CFA=sp+16 => r4=[CFA-8] lr=[CFA-4]"
    regs = out.registers
    assert regs[13] == SP_AT + 16 and regs[4] == 0x44 and regs[15] == 0x3000
    assert regs[arm.CPSR] & arm.CPSR_THUMB                 # lr bit 0: a Thumb caller
    assert [r.address for r in out.evidence.reads] == [SP_AT + 8, SP_AT + 12]


def test_leaf_finish_takes_pc_from_lr_and_keeps_arm_state():
    steps, out = run("b0b0b0", [], registers={14: 0x4000, arm.CPSR: 0x60000030})
    assert steps.row.text(ARCH) == "CFA=sp => lr=same"
    assert out.registers[15] == 0x4000 and out.registers[13] == SP_AT
    assert not out.registers[arm.CPSR] & arm.CPSR_THUMB


def test_vsp_from_register_then_pop():
    # vsp = r7; pop {r7, r14}: CFA = r7 + 8
    steps, out = run("978408", [0, 0, 0x111, 0x5001])
    assert steps.row.cfa.register == 7 and steps.row.cfa.offset == 8
    assert out.registers[7] == 0x111 and out.registers[15] == 0x5000 and out.registers[13] == SP_AT + 16


def test_pop_before_vsp_from_register_uses_an_expression():
    # pop {r4}; vsp = r11; pop {r11, r14}: r4 lives at sp, not at an offset from the CFA
    steps, out = run("a0 9b 8480".replace(" ", ""), [0x44, 0, 0, 0, 0x1BB, 0x6000], {11: SP_AT + 16})
    assert steps.row.registers[4].kind == "expression"
    regs = out.registers
    assert regs[4] == 0x44 and regs[11] == 0x1BB and regs[15] == 0x6000 and regs[13] == SP_AT + 24


def test_vsp_from_a_popped_register_loads_it():
    # pop {r7}; vsp = r7; pop {r14}: the CFA is the popped r7 (+4 after the last pop)
    words = [SP_AT + 12, 0, 0, 0x7001]
    steps, out = run("80089784 00".replace(" ", ""), words)
    assert steps.row.cfa.kind == "expression"
    assert out.registers[13] == SP_AT + 16 and out.registers[15] == 0x7000


def test_pop_of_sp_sets_vsp_and_pop_of_pc_gives_the_pc():
    # pop {r13}: vsp = the loaded value; then pop {r15}
    words = [SP_AT + 8, 0, 0x9000]
    steps, out = run("82008800", words)
    assert steps.pc_from == 15
    assert out.registers[13] == SP_AT + 12 and out.registers[15] == 0x9000


def test_vfp_pops_are_skipped_over_with_a_note():
    # vpush {d8-d9}: 16 bytes; then pop {r14}
    steps, out = run("c9818400", [0, 0, 0, 0, 0xA000])
    assert steps.skipped == ["pop {d8, d9}"]
    assert out.registers[15] == 0xA000 and out.registers[13] == SP_AT + 20
    assert any("not tracked" in n for n in out.evidence.notes)


def test_refuse_and_unreadable_stack():
    steps, _ = run("8000b0", [])
    assert steps.refused
    steps, out = run("a8b0b0", [])
    assert out.status == FAILED and "cannot read" in out.reason


def test_entry_rule():
    entry = IndexEntry(0, 0, 0x1000, 0x1100, EntryKind.INLINE, 0)
    steps = at_entry(entry, ARCH)
    assert steps.row.text(ARCH) == "CFA=sp => lr=same" and steps.pc_from == 14


@pytest.mark.parametrize("hexbytes,count", [("01a8b0", 3), ("978408", 2), ("a09b8480", 3),
                                            ("c9818400", 2), ("b0a8a8", 1)])
def test_every_executed_instruction_has_an_effect(hexbytes, count):
    steps = plan(unwind(hexbytes), ARCH, 0x1000, 0x1100)
    assert len(steps.effects) == count


# -- the code around an innermost pc (arm.code_facts), on GCC's own bytes ------------------
# arm-linux-gnueabihf-gcc -O0 -marm, level2 of tests/fixtures/ehabi.cpp (objdump -d):
#   0 push {fp, lr}   4 add fp, sp, #4   8 sub sp, sp, #16   c str r0, [fp, #-16]
#   10 bl ...         14 sub sp, fp, #4  18 pop {fp, pc}
ARM_O0 = bytes.fromhex("00482de9" "04b08de2" "10d04de2" "10000be5" "ecffffeb" "04d04be2" "0088bde8")
# -mthumb -O2 -fno-omit-frame-pointer shape: push {r7, lr}; add r7, sp, #0; bl; mov sp, r7; pop {r7, pc};
# then a leaf's `bx lr`.
THUMB = bytes.fromhex("80b5" "00af" "fff7feff" "bd46" "80bd" "7047")


def facts(code, start, pc, thumb=False):
    return arm.code_facts(lambda a, n: code[a - start:a - start + n], start, pc, thumb)


@pytest.mark.parametrize("pc, sp, fp", [
    (0x1000, (13, 0), (11, 0)),         # entry: nothing done
    (0x1004, (13, -8), (11, 0)),        # after push {fp, lr}: fp not yet set
    (0x1008, (13, -8), (13, -4)),       # fp = entry sp - 4: the row CFA = fp+4 holds from here
    (0x100c, (13, -24), (13, -4)),
])
def test_prologue_run_from_the_start(pc, sp, fp):
    found = facts(ARM_O0, 0x1000, pc)
    assert arm.value(found.prologue, 13) == sp and arm.value(found.prologue, 11) == fp
    assert found.epilogue is None or pc >= 0x1014
    assert found.stored == (frozenset() if pc == 0x1000 else {11, 14})      # push {fp, lr}


def test_a_call_ends_the_straight_line_and_the_epilogue_is_run_to_the_return():
    found = facts(ARM_O0, 0x1000, 0x1014)
    assert found.prologue is None                       # the bl was on the way
    assert arm.value(found.epilogue, 13) == (11, 4)     # sp = fp - 4, then pop {fp, pc}: fp + 4
    assert not found.returns_by_lr
    assert arm.value(facts(ARM_O0, 0x1000, 0x1018).epilogue, 13) == (13, 8)
    assert facts(ARM_O0, 0x1000, 0x100c).epilogue is None     # a call comes before any return


def test_thumb():
    assert arm.value(facts(THUMB, 0x2000, 0x2004, thumb=True).prologue, 7) == (13, -8)
    assert facts(THUMB, 0x2000, 0x2004, thumb=True).stored == {7, 14}
    at_mov = facts(THUMB, 0x2000, 0x2008, thumb=True)
    assert arm.value(at_mov.epilogue, 13) == (7, 8)
    at_bx = facts(THUMB, 0x2000, 0x200c, thumb=True)
    assert at_bx.returns_by_lr and arm.value(at_bx.epilogue, 13) == (13, 0)
    assert facts(THUMB, 0x2000, 0x2002, thumb=True).prologue is not None
    assert arm.code_facts(lambda a, n: None, 0x2000, 0x2002, True) is None     # unreadable code


@settings(max_examples=300, deadline=None)
@given(code=st.binary(min_size=0, max_size=96), offset=st.integers(0, 48).map(lambda n: n * 2), thumb=st.booleans())
def test_code_facts_never_raise_on_any_bytes(code, offset, thumb):
    found = arm.code_facts(lambda a, n: code[a - 0x4000:a - 0x4000 + n] if a - 0x4000 + n <= len(code) else None,
                           0x4000, 0x4000 + offset, thumb)
    assert found is None or isinstance(found, arm.CodeFacts)
