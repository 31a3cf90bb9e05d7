"""The `sframe` strategy on hand-made processes (SnapshotTarget).

Each test lays out a tiny ELF image in memory (ELF header, a PT_LOAD and a
PT_GNU_SFRAME program header, the .sframe written by
test_sframe_dumps.build_sframe) plus a stack, so module discovery finds the
section the way it does in a debugger: through PT_GNU_SFRAME in memory.
The expected caller registers are worked out by hand from the rows.
"""

import struct

import pytest

from plugin import arch as arches
from plugin import engine
from plugin.validate import agreement as row_agreement
from plugin.model.evidence import Frame
from plugin.model.rules import CfaRule, Row, Rule, RuleKind
from plugin.model.outcome import AttemptStatus
from plugin.strategies import sframe as sframe_strategy
from plugin.target import ModuleRef, SnapshotTarget
from plugin.model.stops import StopReason
from sframe_dumps import build_sframe, fde, fre

X86 = arches.BY_NAME["x86_64"]
A64 = arches.BY_NAME["aarch64"]
AMD64, AARCH64_LE = 3, 2
RSP, RBP, RBX, RIP, R10 = 7, 6, 3, 16, 10

BASE = 0x400000             # the image: ELF header at BASE, code at TEXT, .sframe at SFRAME
TEXT = BASE + 0x1000
SFRAME = BASE + 0x3000
IMAGE_SIZE = 0x4000
STACK = 0x7ff000            # stack region [STACK, STACK + 0x1000)
PT_LOAD, PT_GNU_SFRAME = 1, 0x6474E554


def elf_image(machine, sframe_bytes, with_sframe_phdr=True):
    """ELF header + program headers + zeroed code + .sframe, as mapped at BASE."""
    phdrs = [(PT_LOAD, 5, 0, BASE, IMAGE_SIZE, IMAGE_SIZE)]     # R+X, file offset 0
    if with_sframe_phdr:
        phdrs.append((PT_GNU_SFRAME, 4, SFRAME - BASE, SFRAME, len(sframe_bytes), len(sframe_bytes)))
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, TEXT, 64, 0, 0, 64, 56,
                                 len(phdrs), 64, 0, 0)
    table = b"".join(struct.pack("<IIQQQQQQ", t, f, off, va, va, fsz, msz, 8)
                     for t, f, off, va, fsz, msz in phdrs)
    image = bytearray(IMAGE_SIZE)
    image[:len(header + table)] = header + table
    image[SFRAME - BASE:SFRAME - BASE + len(sframe_bytes)] = sframe_bytes
    return bytes(image)


def process(arch, sframe_bytes, stack_words, with_sframe_phdr=True):
    """SnapshotTarget with the image and a stack; stack_words: {address: 64-bit value}."""
    stack = bytearray(0x1000)
    for address, value in stack_words.items():
        stack[address - STACK:address - STACK + 8] = struct.pack("<Q", value & (2 ** 64 - 1))
    target = SnapshotTarget(arch=arch, regions=[
        (BASE, elf_image(arch.elf_machine, sframe_bytes, with_sframe_phdr)), (STACK, bytes(stack))],
        module_refs=[ModuleRef("demo", BASE, None)])
    return target


def x86_section(fdes, version=3):
    return build_sframe(version, AMD64, fdes, flags=0x5 if version > 1 else 0x1,
                        fixed_ra=-8, address=SFRAME)


def step(target, registers, exact_pc=True, sources=("sframe",)):
    ctx = engine.UnwindContext(target, sources=sources)
    frame = Frame(level=0, pc=registers[target.arch.pc], registers=dict(registers),
                  method="context", exact_pc=exact_pc)
    return sframe_strategy.step(frame, ctx)


# -- x86_64 -------------------------------------------------------------------

def test_frame_pointer_row_recovers_caller_and_explains_itself():
    # push rbp; mov rbp,rsp; ... : from 0x8 on the CFA is rbp+16, rbp saved at CFA-16.
    section = x86_section([fde(TEXT, 0x40, [fre(0, [8]), fre(1, [16, -16]),
                                             fre(4, [16, -16], base="fp")]),
                           fde(TEXT + 0x100, 0x10, [fre(0, [8])])])
    rbp = STACK + 0x100
    caller_pc = TEXT + 0x108
    target = process(X86, section, {rbp + 8: caller_pc, rbp: STACK + 0x400})
    outcome = step(target, {RIP: TEXT + 0x10, RSP: STACK + 0x40, RBP: rbp, RBX: 0x1234})
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    caller = outcome.registers
    assert caller[RIP] == caller_pc and caller[RSP] == rbp + 16 and caller[RBP] == STACK + 0x400
    # SFrame says nothing about rbx: unknown in the caller, not "unchanged".
    assert RBX not in caller
    ev = outcome.evidence
    assert ev.source == "sframe" and ev.found_by == ".sframe SFrame"
    assert ev.section == ".sframe" and ev.section_address == SFRAME and ev.cfa == rbp + 16
    entry = ev.entry
    assert (entry["fde_index"], entry["start"], entry["end"]) == (0, TEXT, TEXT + 0x40)
    assert (entry["fre_index"], entry["fre_start"], entry["row_start"], entry["row_end"]) == \
        (2, TEXT + 4, TEXT + 4, TEXT + 0x40)
    assert entry["cfa_base"] == "rbp" and entry["pc_type"] == "inc" and entry["version"] == 3
    assert entry["found_via"].startswith("PT_GNU_SFRAME")
    assert [(w["value"], w["meaning"]) for w in entry["data_words"]] == [
        (16, "CFA offset from fp (rbp): CFA = rbp+16"), (-16, "frame pointer saved at CFA-16")]
    assert entry["rules"] == {"cfa": "CFA = rbp+16", "fp": "rbp = *(CFA-16)",
                              "ra": "rip = *(CFA-8) (fixed RA offset of the header)"}
    assert ev.row == "CFA=rbp+16 => rbp=[CFA-16] rip=[CFA-8]"
    assert [(r.what, r.address) for r in ev.reads] == [("rip", rbp + 8), ("rbp", rbp)]
    assert any("rbx" in note and "unknown" in note for note in ev.notes)


def test_flex_drap_rule_is_spelled_out_and_followed():
    # realign's DRAP rows (the demo's FDE 6): CFA = *(rbp-16), rbp = *(rbp+0).
    reg_deref_rbp = (RBP << 3) | 3
    section = x86_section([fde(TEXT, 0x90, [fre(0, [(R10 << 3) | 1, 0]),
                                            fre(0x22, [reg_deref_rbp, -16, 0, reg_deref_rbp, 0], base="fp")],
                               fde_type="flex")])
    rbp = STACK + 0x200
    cfa = STACK + 0x300
    caller_pc = TEXT + 0x80
    target = process(X86, section, {rbp - 16: cfa, rbp: STACK + 0x500, cfa - 8: caller_pc})
    outcome = step(target, {RIP: TEXT + 0x30, RSP: STACK + 0x10, RBP: rbp})
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.registers[RIP] == caller_pc
    assert outcome.registers[RSP] == cfa and outcome.registers[RBP] == STACK + 0x500
    entry = outcome.evidence.entry
    assert entry["fde_type"] == "flex" and entry["cfa_base"] == "rbp"
    assert entry["rules"]["cfa"] == "CFA = *(rbp-16)"
    assert entry["rules"]["fp"] == "rbp = *(rbp+0)"
    meanings = [w["meaning"] for w in entry["data_words"]]
    assert meanings[0] == "CFA control word 0x33: base register rbp, dereferenced"
    assert meanings[2].startswith("padding")
    assert outcome.evidence.row.startswith("CFA=*(rbp-16)")
    assert ("CFA", rbp - 16) in [(r.what, r.address) for r in outcome.evidence.reads]


def test_lookup_is_at_pc_minus_1_for_return_addresses():
    # The FRE boundary is at +4: a return address there belongs to the row before.
    section = x86_section([fde(TEXT, 0x20, [fre(0, [8]), fre(4, [16])])])
    sp = STACK + 0x80
    target = process(X86, section, {sp: TEXT + 0x1000, sp + 8: TEXT + 0x1004})
    exact = step(target, {RIP: TEXT + 4, RSP: sp}, exact_pc=True)
    assert exact.evidence.entry["fre_index"] == 1 and exact.evidence.cfa == sp + 16
    caller = step(target, {RIP: TEXT + 4, RSP: sp}, exact_pc=False)
    assert caller.evidence.lookup_pc == TEXT + 3
    assert caller.evidence.entry["fre_index"] == 0 and caller.evidence.cfa == sp + 8


def test_mask_pc_type_rows_repeat_per_plt_entry():
    section = x86_section([fde(TEXT, 0x40, [fre(0, [8]), fre(11, [16])], pc_type="mask", rep_size=16)])
    sp = STACK + 0x80
    target = process(X86, section, {sp: TEXT + 0x800, sp + 8: TEXT + 0x808})
    late = step(target, {RIP: TEXT + 0x20 + 12, RSP: sp})
    early = step(target, {RIP: TEXT + 0x20 + 3, RSP: sp})
    assert late.evidence.cfa == sp + 16 and late.registers[RIP] == TEXT + 0x808
    assert early.evidence.cfa == sp + 8 and early.registers[RIP] == TEXT + 0x800
    assert late.evidence.entry["pc_type"] == "mask" and late.evidence.entry["rep_size"] == 16
    assert (late.evidence.entry["row_start"], late.evidence.entry["row_end"]) == (TEXT + 0x2b, TEXT + 0x30)


def test_outermost_fde_ends_the_walk():
    # v3: an FDE without FREs marks _start-like code; an FRE without data words too.
    section = x86_section([fde(TEXT, 0x10, []), fde(TEXT + 0x10, 0x10, [fre(0, [])])])
    target = process(X86, section, {})
    for pc in (TEXT + 4, TEXT + 0x14):
        outcome = step(target, {RIP: pc, RSP: STACK + 0x80})
        assert outcome.status == AttemptStatus.RECOVERED and outcome.outermost, outcome.reason
        assert outcome.evidence.entry["outermost"]
    bt = engine.unwind(target, {RIP: TEXT + 4, RSP: STACK + 0x80}, sources=("sframe",))
    assert len(bt.frames) == 1 and bt.stop_reason == StopReason.OUTERMOST


def test_signal_frame_bit_makes_the_callers_pc_exact():
    # A trampoline-like FDE with the v3 signal bit: the pc it "returns" to is
    # the interrupted instruction, looked up as is (not pc-1).
    section = x86_section([fde(TEXT, 0x10, [fre(0, [8])], signal=True),
                           fde(TEXT + 0x100, 0x20, [fre(0, [8])])])
    sp = STACK + 0x80
    interrupted = TEXT + 0x100      # the first instruction: pc-1 would fall outside the FDE
    target = process(X86, section, {sp: interrupted, sp + 8: 0})
    bt = engine.unwind(target, {RIP: TEXT + 2, RSP: sp}, sources=("sframe",))
    assert bt.frames[0].signal_frame
    assert bt.frames[1].pc == interrupted and bt.frames[1].exact_pc
    assert bt.frames[1].method == "sframe"
    assert bt.stop_reason == StopReason.PC_ZERO     # the second frame's return address is 0


def test_whole_walk_through_three_sframe_frames():
    section = x86_section([fde(TEXT, 0x10, [fre(0, [8])]),
                           fde(TEXT + 0x10, 0x20, [fre(0, [8]), fre(1, [16, -16])]),
                           fde(TEXT + 0x30, 0x20, [fre(0, [8]), fre(4, [32])])])
    sp0 = STACK + 0x100
    words = {sp0: TEXT + 0x18,                      # leaf's return into f2 (+8)
             sp0 + 8 + 0: STACK + 0x900,            # f2 saved rbp at its CFA-16
             sp0 + 16: TEXT + 0x38,                 # f2's return into f3 (+8)
             sp0 + 24 + 24: 0}                      # f3's return address: 0 ends the walk
    target = process(X86, section, words)
    bt = engine.unwind(target, {RIP: TEXT + 2, RSP: sp0, RBP: 0x55}, sources=("sframe",))
    assert [f.pc for f in bt.frames] == [TEXT + 2, TEXT + 0x18, TEXT + 0x38]
    assert [f.method for f in bt.frames] == ["context", "sframe", "sframe"]
    assert bt.frames[2].registers[RBP] == STACK + 0x900
    assert bt.stop_reason == StopReason.PC_ZERO


# -- not applicable, failures ---------------------------------------------------

def test_module_without_pt_gnu_sframe_is_not_applicable():
    section = x86_section([fde(TEXT, 0x10, [fre(0, [8])])])
    target = process(X86, section, {}, with_sframe_phdr=False)
    outcome = step(target, {RIP: TEXT + 4, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "no PT_GNU_SFRAME" in outcome.reason


def test_pc_outside_every_fde_and_outside_every_module():
    section = x86_section([fde(TEXT, 0x10, [fre(0, [8])])])
    target = process(X86, section, {})
    outcome = step(target, {RIP: TEXT + 0x800, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "no SFrame FDE" in outcome.reason
    outcome = step(target, {RIP: 0x10, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "no module" in outcome.reason


def test_pc_before_the_first_fre_is_not_applicable():
    section = x86_section([fde(TEXT, 0x10, [fre(4, [8])])])
    outcome = step(process(X86, section, {}), {RIP: TEXT + 1, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "no FRE starts" in outcome.reason


def test_bad_section_is_reported_not_raised():
    section = bytearray(x86_section([fde(TEXT, 0x10, [fre(0, [8])])]))
    section[0:2] = b"\x12\x34"              # bad magic
    outcome = step(process(X86, bytes(section), {}), {RIP: TEXT + 4, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "bad magic" in outcome.reason
    # An FRE with an unknown data-word size code: the FDE decodes, its FREs do not.
    section = bytearray(x86_section([fde(TEXT, 0x10, [fre(0, [8])])]))
    info_at = len(section) - 2              # the last FRE: start byte, info byte, one word
    section[info_at] |= 0x60
    outcome = step(process(X86, bytes(section), {}), {RIP: TEXT + 4, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.FAILED and "bad SFrame" in outcome.reason


def test_abi_of_another_architecture_is_refused():
    section = build_sframe(3, AARCH64_LE, [fde(TEXT, 0x10, [fre(0, [8])])], address=SFRAME)
    outcome = step(process(X86, section, {}), {RIP: TEXT + 4, RSP: STACK + 0x80})
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "does not match" in outcome.reason


def test_unreadable_saved_return_address_fails_with_the_read():
    section = x86_section([fde(TEXT, 0x10, [fre(0, [0x7f])])])
    outcome = step(process(X86, section, {}), {RIP: TEXT + 4, RSP: STACK + 0xff8})
    assert outcome.status == AttemptStatus.FAILED and "cannot read" in outcome.reason


# -- aarch64 --------------------------------------------------------------------

def a64_section(fdes, version=3):
    return build_sframe(version, AARCH64_LE, fdes, flags=0x5 if version > 1 else 0x1, address=SFRAME)


def test_aarch64_signed_return_address_is_stripped():
    # stp x29, x30, [sp, -32]!: CFA = sp+32, RA at CFA-24, FP at CFA-32; RA signed (paciasp).
    section = a64_section([fde(TEXT, 0x40, [fre(0, [0]), fre(4, [32, -24, -32], mangled=True)])])
    sp = STACK + 0x100
    caller_pc = TEXT + 0x200
    signed = caller_pc | (0x2A5F << 48)     # a pointer-auth code in the top bits
    target = process(A64, section, {sp + 8: signed, sp: STACK + 0x700})
    outcome = step(target, {A64.pc: TEXT + 8, A64.sp: sp, 29: 0x99, 30: 0x1234, 19: 5})
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.registers[A64.pc] == caller_pc
    assert outcome.registers[29] == STACK + 0x700 and outcome.registers[A64.sp] == sp + 32
    assert 19 not in outcome.registers
    entry = outcome.evidence.entry
    assert entry["ra_mangled"] and entry["pauth_key"] == "A"
    assert entry["rules"]["ra"] == "x30 = *(CFA-24), signed: strip pointer authentication"
    assert [w["meaning"] for w in entry["data_words"]] == [
        "CFA offset from sp (sp): CFA = sp+32", "return address saved at CFA-24",
        "frame pointer saved at CFA-32"]
    assert any("signed" in n and "stripped" in n for n in outcome.evidence.notes)


def test_aarch64_return_address_still_in_the_link_register():
    section = a64_section([fde(TEXT, 0x10, [fre(0, [0])])])
    outcome = step(process(A64, section, {}), {A64.pc: TEXT, A64.sp: STACK + 0x80, 30: TEXT + 0x300, 29: 7})
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.registers[A64.pc] == TEXT + 0x300
    assert outcome.registers[29] == 7                 # FP not saved: unchanged
    assert outcome.evidence.entry["rules"]["ra"].startswith("x30 unchanged")


# -- sources ------------------------------------------------------------------------

def test_sframe_is_registered_after_cfi():
    assert "sframe" in engine.STRATEGIES
    order = list(engine.DEFAULT_SOURCES)
    assert order.index("cfi") < order.index("sframe")
    assert engine.parse_sources("sframe") == ("sframe",)
    assert engine.parse_sources("sframe,cfi") == ("sframe", "cfi")


def test_default_sources_fall_back_to_sframe_when_cfi_has_nothing():
    section = x86_section([fde(TEXT, 0x10, [fre(0, [8])])])
    sp = STACK + 0x80
    target = process(X86, section, {sp: 0})
    bt = engine.unwind(target, {RIP: TEXT + 4, RSP: sp})
    assert bt.stop_reason == StopReason.PC_ZERO
    # The one step that happened was sframe's: cfi has no table for this module.
    ctx = engine.UnwindContext(target)
    frame = Frame(level=0, pc=TEXT + 4, registers={RIP: TEXT + 4, RSP: sp}, method="context", exact_pc=True)
    outcome, attempts = engine.step_frame(frame, ctx)
    assert outcome.source == "sframe"
    assert attempts[0].source == "cfi" and attempts[0].outcome == AttemptStatus.NOT_APPLICABLE


# -- row agreement ------------------------------------------------------------------

def _row(cfa, **registers):
    return Row(address=0x1000, end=0x1010, cfa=cfa, registers=registers)


def test_agreement_compares_meaning_not_spelling():
    drap_expression = bytes([0x70 + RBP]) + bytes([0x70]) + bytes([0x06])     # breg6 -16; deref
    cfi = Row(0x1000, CfaRule("expression", expression=drap_expression),
              {RBP: Rule(RuleKind.EXPRESSION, expression=bytes([0x76, 0])), RIP: Rule(RuleKind.OFFSET, offset=-8)})
    sframe = Row(0x1000, CfaRule("register", register=RBP, offset=-16, deref=True),
                 {RBP: Rule(RuleKind.EXPRESSION, expression=bytes([0x76, 0])), RIP: Rule(RuleKind.OFFSET, offset=-8)})
    result = row_agreement.compare(cfi, sframe, X86, 0x1004)
    assert result["agree"] and all(result[k]["agree"] for k in ("cfa", "fp", "ra"))


def test_agreement_names_each_disagreement_on_its_own():
    cfi = Row(0x1000, CfaRule("register", register=RSP, offset=16),
              {RBP: Rule(RuleKind.OFFSET, offset=-16), RIP: Rule(RuleKind.OFFSET, offset=-8)})
    wrong_cfa = Row(0x1000, CfaRule("register", register=RSP, offset=24),
                    {RBP: Rule(RuleKind.OFFSET, offset=-16), RIP: Rule(RuleKind.OFFSET, offset=-8)})
    result = row_agreement.compare(cfi, wrong_cfa, X86, 0x1004)
    assert not result["agree"]
    assert [result[k]["agree"] for k in ("cfa", "fp", "ra")] == [False, True, True]
    assert result["cfa"]["cfi"] == "rsp+16" and result["cfa"]["sframe"] == "rsp+24"
    fp_unsaved = Row(0x1000, CfaRule("register", register=RSP, offset=16), {RIP: Rule(RuleKind.OFFSET, offset=-8)})
    result = row_agreement.compare(cfi, fp_unsaved, X86, 0x1004)
    assert [result[k]["agree"] for k in ("cfa", "fp", "ra")] == [True, False, True]
    assert result["fp"]["sframe"] == "same (no rule)"
    assert "differ" in result["fp"]["detail"]
    text = row_agreement.text(result)
    assert "DISAGREE" in text and "FP  DIFFER" in text


def test_agreement_on_aarch64_signing_and_link_register():
    lr_same = Row(0x1000, CfaRule("register", register=31, offset=0), {})
    lr_rule = Row(0x1000, CfaRule("register", register=31, offset=0), {30: Rule(RuleKind.SAME)})
    assert row_agreement.compare(lr_same, lr_rule, A64, 0x1000)["agree"]
    signed = Row(0x1000, CfaRule("register", register=31, offset=32),
                 {29: Rule(RuleKind.OFFSET, offset=-32), 30: Rule(RuleKind.OFFSET, offset=-24)}, ra_signed=True)
    unsigned = Row(0x1000, CfaRule("register", register=31, offset=32),
                   {29: Rule(RuleKind.OFFSET, offset=-32), 30: Rule(RuleKind.OFFSET, offset=-24)})
    result = row_agreement.compare(signed, unsigned, A64, 0x1004)
    assert [result[k]["agree"] for k in ("cfa", "fp", "ra")] == [True, True, False]
    assert result["ra"]["cfi"].endswith("(signed)")


def test_agreement_with_an_outermost_sframe_row():
    cfi = Row(0x1000, CfaRule("register", register=RSP, offset=8), {RIP: Rule(RuleKind.UNDEFINED)})
    sframe = Row(0x1000, CfaRule("register", register=RSP, offset=0), {RIP: Rule(RuleKind.UNDEFINED)})
    result = row_agreement.compare(cfi, sframe, X86, 0x1000)
    assert result["agree"] and result["ra"]["agree"] is True
    assert result["cfa"]["agree"] is None and "outermost" in result["cfa"]["detail"]
    ordinary = Row(0x1000, CfaRule("register", register=RSP, offset=8), {RIP: Rule(RuleKind.OFFSET, offset=-8)})
    assert not row_agreement.compare(ordinary, sframe, X86, 0x1000)["ra"]["agree"]


def test_agreement_evaluates_the_plt_expression():
    # .plt CFI: CFA = rsp+8 + ((rip&15) >= 11) * 8; SFrame: sp+8 until +11, then sp+16.
    plt = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    cfi = Row(0x1000, CfaRule("expression", expression=plt), {RIP: Rule(RuleKind.OFFSET, offset=-8)})
    early = Row(0x1000, CfaRule("register", register=RSP, offset=8), {RIP: Rule(RuleKind.OFFSET, offset=-8)})
    late = Row(0x100b, CfaRule("register", register=RSP, offset=16), {RIP: Rule(RuleKind.OFFSET, offset=-8)})
    assert row_agreement.compare(cfi, early, X86, 0x1004)["agree"]
    assert row_agreement.compare(cfi, late, X86, 0x100c)["agree"]
    assert not row_agreement.compare(cfi, late, X86, 0x1004)["agree"]


def test_val_offset_and_offset_are_told_apart():
    saved = Row(0x1000, CfaRule("register", register=RSP, offset=16), {RBP: Rule(RuleKind.OFFSET, offset=-16)})
    value = Row(0x1000, CfaRule("register", register=RSP, offset=16), {RBP: Rule(RuleKind.VAL_OFFSET, offset=-16)})
    assert not row_agreement.compare(saved, value, X86, 0x1000)["fp"]["agree"]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_version_unwinds_the_same(version):
    section = x86_section([fde(TEXT, 0x20, [fre(0, [8]), fre(1, [16, -16])])], version=version)
    sp = STACK + 0x80
    target = process(X86, section, {sp + 8: TEXT + 0x100, sp: 0x4242})
    outcome = step(target, {RIP: TEXT + 5, RSP: sp})
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert (outcome.registers[RIP], outcome.registers[RBP], outcome.registers[RSP]) == \
        (TEXT + 0x100, 0x4242, sp + 16)
    assert outcome.evidence.entry["version"] == version
