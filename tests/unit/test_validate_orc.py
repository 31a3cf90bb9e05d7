"""ORC rows judged against code (plugin.validate.orc): rows built here over x86-64 code assembled
by hand; the decoder's errors carry their kind. The real kernel's figures: docs/sources.md."""
import pytest

from plugin.analysis import CodeAnalysis
from plugin.arch import by_name
from plugin.errors import DecodeError, DecodeKind
from plugin.formats import orc
from plugin.formats.orc import OrcEntry, OrcReg, OrcType
from plugin.validate import orc as check_orc

BASE = 0x1000
# push rbp; mov rbp, rsp; sub rsp, 0x10; call +0; leave; ret
CODE = bytes.fromhex("55" "4889e5" "4883ec10" "e800000000" "c9" "c3")


def row(ip, sp_reg, sp, bp_reg=OrcReg.UNDEFINED, bp=0, kind=OrcType.CALL, index=0):
    return OrcEntry(index, BASE + ip, sp_reg, sp, bp_reg, bp, kind, False, False, 0, 0)


def judged(rows, code=CODE):
    analysis = CodeAnalysis(by_name("x86_64"), lambda a, n: (code + b"\x90" * 32)[a - BASE:a - BASE + n])
    return check_orc.check(rows, analysis.decode_at)


def objtools_rows(after_push=(OrcReg.PREV_SP, -16)):
    return [row(0, OrcReg.SP, 8), row(1, OrcReg.SP, 16, *after_push), row(4, OrcReg.BP, 16, OrcReg.PREV_SP, -16),
            row(14, OrcReg.SP, 8), row(15, OrcReg.UNDEFINED, 0, kind=OrcType.UNDEFINED)]


def test_objtools_rows_are_right():
    report = judged(objtools_rows())
    assert (report.rows, report.right, report.wrong) == (4, 4, 0), report.text()
    assert report.instructions.wrong == 0 and report.instructions.right == 6


def test_a_wrong_cfa_and_a_wrong_bp_save_are_found():
    rows = objtools_rows()
    rows[1] = row(1, OrcReg.SP, 24, OrcReg.PREV_SP, -16)        # push rbp moves the CFA by 8, not 16
    report = judged(rows)
    found = report.disagreements[0]
    assert found.address == BASE and found.instruction == "push rbp"
    assert found.analysis == "after push rbp the CFA is not sp+24"
    # the row is wrong on both sides: mov rbp, rsp then makes rbp CFA-24, not the next row's bp+16
    assert report.wrong == 2 and report.disagreements[1].instruction == "mov rbp, rsp"
    report = judged(objtools_rows(after_push=(OrcReg.PREV_SP, -24)))      # rbp is saved at CFA-16
    assert report.wrong == 1 and report.disagreements[0].findings[0].item == "bp"
    assert report.disagreements[0].analysis == "push rbp saves rbp at CFA-16, the row says cfa-24"


def test_what_the_analysis_cannot_decide_is_undecided():
    rows = objtools_rows()
    rows[0] = row(0, OrcReg.SP_INDIRECT, 8)                     # the IRQ stack's rule
    rows[3] = row(14, OrcReg.SP, 8, kind=OrcType.REGS)          # an entry-code hint
    report = judged(rows)
    assert report.wrong == 0 and report.undecided == 3
    assert set(report.reasons) == {"CFA rule [sp]+8", "the next row is regs, sp+8",
                                   "regs row (objtool's hints; not judged)"}
    # a call ending a range whose next row does not follow: a callee that may not return
    report = judged([row(0, OrcReg.SP, 8), row(5, OrcReg.SP, 16)], bytes.fromhex("e800000000" "c3"))
    assert report.wrong == 0 and "a call ends the range" in " ".join(report.reasons)


def test_decode_errors_carry_their_kind():
    with pytest.raises(DecodeError) as info:
        orc.check_sizes(10, 12)
    assert info.value.kind is DecodeKind.TRUNCATED
    with pytest.raises(DecodeError) as info:
        orc.check_sizes(8, 18)
    assert info.value.kind is DecodeKind.MALFORMED
    with pytest.raises(DecodeError) as info:
        orc.choose_layout(b"\x00" * 20, None, [])
    assert info.value.kind is DecodeKind.UNSUPPORTED
