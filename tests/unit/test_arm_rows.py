"""A table row with no rule for the return-address register (a leaf's CFI row on Arm)."""

import struct

from plugin.arch import arm, by_name
from plugin.model.evidence import Frame, StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.strategies.row_step import step_with_row

SP = 0x8000


class Ctx:
    def __init__(self, arch):
        self.arch = arch

    def read_memory(self, address, size):
        return struct.pack("<I", 0x1234)[:size]


def _step(arch, registers, rules=None):
    row = Row(address=0x1000, cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=0),
              registers=rules or {}, end=0x1010)
    frame = Frame(level=0, pc=0x1000, registers=registers, method="context", exact_pc=True)
    evidence = StepEvidence(source="cfi", found_by=".debug_frame CFI", lookup_pc=0x1000)
    return step_with_row(row, frame, Ctx(arch), evidence)


def test_lr_without_a_rule_keeps_its_value_and_thumb_bit_sets_cpsr():
    outcome = _step(arm.ARCH, {13: SP, 14: 0x2001, 15: 0x1000, arm.CPSR: 0x60000010})
    assert outcome.status == AttemptStatus.RECOVERED
    caller = outcome.registers
    assert caller[15] == 0x2000 and caller[14] == 0x2001 and caller[13] == SP
    assert caller[arm.CPSR] == 0x60000030        # T set: the caller runs Thumb code
    assert any(n.startswith("the row has no rule for lr: it keeps its value 0x2001") for n in outcome.evidence.notes)
    arm_caller = _step(arm.ARCH, {13: SP, 14: 0x2000, arm.CPSR: 0x60000030}).registers
    assert arm_caller[15] == 0x2000 and arm_caller[arm.CPSR] == 0x60000010


def test_an_undefined_lr_is_still_the_outermost_frame():
    outcome = _step(arm.ARCH, {13: SP, 14: 0x2001}, {14: Rule(RuleKind.UNDEFINED)})
    assert outcome.outermost and outcome.registers is None


def test_where_the_return_address_column_is_the_pc_there_is_no_such_rule():
    x86 = by_name("x86_64")
    outcome = _step(x86, {x86.sp: SP, x86.pc: 0x1000})
    assert outcome.status == AttemptStatus.FAILED and outcome.kind == FailureKind.NO_RETURN_ADDRESS
