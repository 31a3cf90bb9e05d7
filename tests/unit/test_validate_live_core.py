"""plugin.validate.live and .stepping without a debugger: a scripted call of a four-instruction function.

push rbx; mov rbx, 7; pop rbx; ret, entered with rbx = 0xb and the return
address 0x5555 at [rsp]. The table source is a hand-built row list read by
the shared row evaluator (step_with_row), so what is tested is the
comparison with the truth at entry, the summary, the bound and the endings.
"""

import struct

from plugin.arch import by_name
from plugin.analysis.ops import Flow, Insn
from plugin.engine import UnwindContext
from plugin.modules import ModuleMap
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import Outcome
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.strategies.row_step import step_with_row
from plugin.target import SnapshotTarget
from plugin.validate import live, stepping

ARCH = by_name("i386:x86-64")
RSP, RBX, RIP = 7, 3, 16
STACK = 0x7000
RA = 0x5555


def row(address, offset, rbx_saved=False):
    registers = {RIP: Rule(RuleKind.OFFSET, offset=-8)}
    if rbx_saved:
        registers[RBX] = Rule(RuleKind.OFFSET, offset=-16)
    return Row(address, CfaRule(CfaKind.REGISTER, register=RSP, offset=offset), registers)


RIGHT = {0x1000: row(0x1000, 8), 0x1001: row(0x1001, 16, True), 0x1004: row(0x1004, 16, True),
         0x1005: row(0x1005, 8)}
MISSING_ADJUST = {**RIGHT, 0x1001: row(0x1001, 8, True), 0x1004: row(0x1004, 8, True)}
CODE = {0x1000: (1, "push rbx", Flow.NEXT), 0x1001: (3, "mov rbx, 7", Flow.NEXT),
        0x1004: (1, "pop rbx", Flow.NEXT), 0x1005: (1, "ret", Flow.RET)}


def table(rows):
    def step(frame, ctx):
        found = rows.get(frame.pc)
        if found is None:
            return Outcome.not_applicable("cfi", "no row")
        return step_with_row(found, frame, ctx, StepEvidence("cfi", "test rows", frame.pc))
    return step


class Scripted(stepping.Stepper):
    """The machine: each step applies the next instruction's effect to registers and stack."""

    def __init__(self, target, ending=None):
        self.target, self.ending = target, ending
        self.regs = {RSP: STACK + 0x100, RBX: 0xB, RIP: 0x1000}
        self.write(STACK + 0x100, RA)

    def write(self, address, value):
        self.target.regions[0][1][address - STACK:address - STACK + 8] = struct.pack("<Q", value)

    def read(self, address):
        return struct.unpack("<Q", self.target.read_memory(address, 8))[0]

    def registers(self):
        return dict(self.regs)

    def step(self, over):
        pc, regs = self.regs[RIP], self.regs
        if pc == 0x1000:
            regs[RSP] -= 8
            self.write(regs[RSP], regs[RBX])
        elif pc == 0x1001:
            regs[RBX] = 7
        elif pc == 0x1004:
            regs[RBX] = self.read(regs[RSP])
            regs[RSP] += 8
        elif pc == 0x1005:
            regs[RIP] = self.read(regs[RSP])
            regs[RSP] += 8
            return None
        regs[RIP] = pc + CODE[pc][0]
        return self.ending if pc == 0x1001 else None

    def where(self):
        return "0x%x" % self.regs[RIP]


def validate(rows, limit=100, ending=None):
    target = SnapshotTarget(arch=ARCH, regions=[(STACK, bytearray(0x200))],
                            symbols=[(0x1000, 0x1006, "f")])
    machine = Scripted(target, ending)
    truth = live.truth_at_entry(ARCH, machine.registers(), target.read_memory)
    decode = lambda a: Insn(a, CODE[a][0], CODE[a][1], flow=CODE[a][2]) if a in CODE else None    # noqa: E731
    check = live.LiveValidation(lambda s: UnwindContext(target, ModuleMap(target), (s,)), ARCH, ["cfi"],
                                {"cfi": table(rows)}, truth, target.symbol, decode)
    ending, steps, detail = stepping.run(check, machine, limit)
    return check.report("f", ending, steps, detail, False, machine.where())


def test_truth_at_entry_is_the_abis_rule():
    target = SnapshotTarget(arch=ARCH, regions=[(STACK, bytearray(0x200))])
    Scripted(target)
    truth = live.truth_at_entry(ARCH, {RSP: STACK + 0x100, RBX: 0xB, RIP: 0x1000}, target.read_memory)
    assert (truth.cfa, truth.return_address, truth.saved[RBX]) == (STACK + 0x108, RA, 0xB)


def test_right_rows_are_right_at_every_instruction():
    data, text = validate(RIGHT)
    assert (data["ending"], data["complete"], data["steps"], data["path"]) == \
        ("returned", True, 4, [0x1000, 0x1001, 0x1004, 0x1005])
    assert data["wrong"] == [] and data["sources"]["cfi"]["right"] == 4
    assert "cfi: 4/4 instructions right" in text and "stopped at 0x5555" in text


def test_a_missing_adjustment_is_wrong_where_it_is_in_force_with_both_values():
    data, text = validate(MISSING_ADJUST)
    assert data["sources"]["cfi"]["wrong"] == [0x1001, 0x1004]
    first = data["wrong"][0]
    assert (first["place"], first["instruction"], first["row"]) == ("+0x1", "mov rbx, 7",
                                                                     "CFA=rsp+8 => rbx=[CFA-16] rip=[CFA-8]")
    items = {i["item"]: (i["predicted"], i["true"]) for i in first["items"]}
    assert items["cfa"] == (STACK + 0x100, STACK + 0x108)
    assert items["return address"] == (0xB, RA)          # read from the slot where rbx was pushed
    assert "cfi: 2/4 instructions right, wrong at +0x1, +0x4" in text


def test_the_step_bound_and_other_endings_say_where_the_program_is_left():
    data, text = validate(RIGHT, limit=2)
    assert (data["ending"], data["steps"], data["complete"]) == ("step-limit", 2, False)
    assert "ran part of the function: it is now stopped at 0x1004" in text
    data, text = validate(RIGHT, ending=(live.Ending.EXITED, "exit code 0"))
    assert (data["ending"], data["steps"]) == ("exited", 2) and "ran until it exited" in text
    data, _ = validate(RIGHT, ending=(live.Ending.INTERRUPTED, "breakpoint 2 was hit"))
    assert data["ending_detail"] == "stepping was interrupted: breakpoint 2 was hit"


def test_a_source_with_no_row_is_not_covered_never_wrong():
    data, text = validate({0x1000: RIGHT[0x1000]})
    assert data["sources"]["cfi"] == {"checked": 1, "right": 1, "wrong": [], "unknown": [], "not_covered": 3,
                                      "not_judged": 0}
    assert "(3 not covered)" in text
