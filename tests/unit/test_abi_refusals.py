"""Tables whose answer breaks the ABI are refused with a reason (issue 19 item 6):
an AMD64 .sframe whose header fixes no RA offset, and, in the engine, a
caller identical to its callee. Hand-made processes from test_sframe_unwind."""

from plugin import engine
from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus, FailureKind
from plugin.strategies import sframe as sframe_strategy
from sframe_dumps import build_sframe, fde, fre
from tests.unit.test_sframe_unwind import AMD64, RBP, RIP, RSP, SFRAME, STACK, TEXT, X86, process, step


def amd64_sframe(fixed_ra):
    # One function: CFA = rsp+16, rbp saved at CFA-16; with fixed_ra=0 the FRE's
    # second word is read as the RA slot (the bug the issue describes).
    return build_sframe(3, AMD64, [fde(TEXT, 0x40, [fre(0, [16, -16])])], fixed_ra=fixed_ra,
                        address=SFRAME)


def stack_and_registers():
    sp = STACK + 0x100
    return {sp + 8: TEXT + 0x200, sp: STACK + 0x400}, {RIP: TEXT + 0x10, RSP: sp, RBP: STACK + 0x300}


def test_amd64_header_with_the_abis_fixed_ra_offset_is_used():
    words, registers = stack_and_registers()
    outcome = step(process(X86, amd64_sframe(-8), words), registers)
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.registers[RIP] == TEXT + 0x200


def test_amd64_header_without_a_fixed_ra_offset_is_refused_with_a_reason():
    words, registers = stack_and_registers()
    target = process(X86, amd64_sframe(0), words)
    outcome = step(target, registers)
    assert outcome.status != AttemptStatus.RECOVERED
    ctx = engine.UnwindContext(target, sources=("sframe",))
    tables = sframe_strategy.SFrameTables.of(ctx.modules.find(TEXT), target)
    assert tables.section() is None
    assert any("header refused" in p and "fixed RA offset is 0" in p and "CFA-8" in p
               for p in tables.problems), tables.problems


def test_engine_rejects_a_caller_identical_to_its_callee(monkeypatch):
    # With the header check off, a fixed-RA-0 FRE holding only the CFA word
    # leaves rip "same": the caller would be the callee's own pc.
    monkeypatch.setattr(sframe_strategy.SFrameTables, "_breaks_abi", lambda self, section: False)
    section = build_sframe(3, AMD64, [fde(TEXT, 0x40, [fre(0, [16])])], fixed_ra=0, address=SFRAME)
    words, registers = stack_and_registers()
    target = process(X86, section, words)
    assert step(target, registers).status == AttemptStatus.RECOVERED     # the strategy alone is fooled
    ctx = engine.UnwindContext(target, sources=("sframe",))
    frame = Frame(level=0, pc=registers[RIP], registers=dict(registers), method="context", exact_pc=True)
    outcome, attempts = engine.step_frame(frame, ctx)
    assert outcome is None
    [attempt] = attempts
    assert attempt.outcome == AttemptStatus.REJECTED and attempt.kind == FailureKind.NO_RETURN_ADDRESS
    assert "identical to its callee" in attempt.reason and "0x%x" % registers[RIP] in attempt.reason
    trace = engine.unwind(target, registers, sources=("sframe",))
    assert len(trace.frames) == 1
