"""The frame-pointer and scan sources on hand-built stacks (SnapshotTarget).

Each check the two sources make is fed the damage it must reject, and the
walk must end with the matching stop reason. The process is built by
tests/helpers/fallback_world.py: one module with symbols, a stack, a data page,
an anonymous executable page for JIT code.
"""

import pytest

from plugin import engine
from plugin.model.evidence import Frame, StepEvidence
from plugin.model.rules import CfaRule, Row
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.strategies import frame_pointer, scan
from plugin.model.stops import StopReason
from fallback_world import (A64, CODE, DATA, I386, JIT, STACK, STACK_TOP, X86, World,
                            x86_chain)

FP_ONLY = ("frame-pointer",)
SCAN_ONLY = ("scan",)
BOTH = ("frame-pointer", "scan")


def pcs_and_sps(bt, arch):
    return [(f.pc, f.registers[arch.sp]) for f in bt.frames[1:]]


def innermost(world, registers, exact=True):
    return Frame(level=0, pc=registers[world.arch.pc], registers=registers, method="context", exact_pc=exact)


# -- frame-pointer: the chain ------------------------------------------------------

def test_rbp_chain_is_followed_to_start():
    w, regs, expected = x86_chain()
    bt = w.unwind(regs, sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    assert [f.method for f in bt.frames] == ["context"] + ["frame-pointer"] * 3
    assert [f.function for f in bt.frames] == ["leaf", "level1", "main", "_start"]
    # _start keeps no frame record, and its name is no evidence: alone, the
    # frame-pointer source cannot say more; the scan reads to the stack's top.
    assert bt.stop_reason == StopReason.NO_UNWIND_INFO and "_start does not set up" in bt.stop_detail
    both = w.unwind(regs, sources=BOTH)
    assert pcs_and_sps(both, X86) == expected
    assert both.stop_reason == StopReason.OUTERMOST and "top of the stack" in both.stop_detail
    first = bt.frames[1].evidence
    assert first.row == "CFA=rbp+16 => rbp=[CFA-16] rip=[CFA-8]"
    assert [(r.what, r.address) for r in first.reads] == [("rbp", STACK_TOP - 0x300), ("rip", STACK_TOP - 0x2F8)]
    assert first.found_by == "frame pointer (rbp chain)" and first.entry["kind"] == "chain"


def test_only_pc_sp_and_frame_pointer_are_claimed_for_the_caller():
    w, regs, _ = x86_chain()
    bt = w.unwind(regs, sources=FP_ONLY)
    caller = bt.frames[1]
    assert set(caller.registers) == {X86.pc, X86.sp, X86.fp}        # rbx (callee-saved) is not guessed
    assert any("rbx" in note and "unknown" in note for note in caller.evidence.notes)


def test_i386_ebp_chain():
    w = World(I386)
    w.function("_start", 0x000, 0x100, frame_pointer=False)
    w.function("main", 0x100, 0x100)
    w.function("leaf", 0x200, 0x100)
    ra_start, ra_main = w.call_at(0x010), w.call_at(0x120)
    main_fp, leaf_fp = STACK_TOP - 0x100, STACK_TOP - 0x200
    w.record(main_fp, 0, ra_start)
    w.record(leaf_fp, main_fp, ra_main)
    bt = w.unwind(w.registers(pc=CODE + 0x210, sp=leaf_fp - 0x10, fp=leaf_fp), sources=FP_ONLY)
    assert pcs_and_sps(bt, I386) == [(ra_main, leaf_fp + 8), (ra_start, main_fp + 8)]
    assert bt.frames[1].evidence.row == "CFA=ebp+8 => ebp=[CFA-8] eip=[CFA-4]"
    assert bt.stop_reason == StopReason.NO_UNWIND_INFO      # _start's name is no evidence
    regs = w.registers(pc=CODE + 0x210, sp=leaf_fp - 0x10, fp=leaf_fp)
    assert w.unwind(regs, sources=BOTH).stop_reason == StopReason.OUTERMOST     # the scan reaches the top


def test_aarch64_frame_records():
    w = World(A64)
    w.function("_start", 0x000, 0x100, frame_pointer=False)
    w.function("main", 0x100, 0x100)
    w.function("leaf", 0x200, 0x100)
    ra_start, ra_main = w.call_at(0x010), w.call_at(0x120, "reg")
    main_fp, leaf_fp = STACK_TOP - 0x100, STACK_TOP - 0x200
    w.record(main_fp, 0, ra_start)
    w.record(leaf_fp, main_fp, ra_main | (0x2A << 48))     # a pointer-auth signature on the saved x30
    bt = w.unwind(w.registers(pc=CODE + 0x210, sp=leaf_fp, fp=leaf_fp), sources=FP_ONLY)
    assert [f.pc for f in bt.frames[1:]] == [ra_main, ra_start]
    assert bt.frames[1].evidence.row == "CFA=x29+16 => x29=[CFA-16] x30=[CFA-8]"
    assert any("pointer-auth" in n for n in bt.frames[1].evidence.notes)
    assert bt.stop_reason == StopReason.NO_UNWIND_INFO      # _start's name is no evidence
    regs = w.registers(pc=CODE + 0x210, sp=leaf_fp, fp=leaf_fp)
    assert w.unwind(regs, sources=BOTH).stop_reason == StopReason.OUTERMOST     # the scan reaches the top


# -- frame-pointer: every check rejects what it should ---------------------------------

def damage_fp(value):
    def apply(w, regs):
        regs[X86.fp] = value(regs)
    return apply


def damage_record(slot, value):
    """Overwrite word `slot` (0: saved rbp, 1: return address) of leaf's frame record."""
    def apply(w, regs):
        w.word(regs[X86.fp] + 8 * slot, value(regs))
    return apply


CHECKS = {
    # name: (damage, stop reason, callers recovered, words in the failure)
    "frame pointer 0": (damage_fp(lambda r: 0), StopReason.NO_UNWIND_INFO, 0, "rbp is 0"),
    "misaligned frame pointer": (damage_fp(lambda r: r[X86.fp] + 3), StopReason.MISALIGNED_STACK, 0,
                                 "not aligned"),
    "frame pointer below sp": (damage_fp(lambda r: r[X86.sp] - 0x40), StopReason.CFA_NOT_INCREASING, 0,
                               "not above the stack pointer"),
    "frame pointer unmapped": (damage_fp(lambda r: 0x10000000), StopReason.UNREADABLE_MEMORY, 0,
                               "no readable mapping"),
    "frame pointer into code": (damage_fp(lambda r: CODE + 0x800), StopReason.NO_UNWIND_INFO, 0,
                                "not stack memory"),
    "return address 0": (damage_record(1, lambda r: 0), StopReason.PC_ZERO, 0, "return address 0"),
    "return address into data": (damage_record(1, lambda r: DATA + 8), StopReason.RETURN_ADDRESS_NOT_CODE, 0,
                                 "not in executable memory"),
    "return address after no call": (damage_record(1, lambda r: CODE + 0x250), StopReason.NO_UNWIND_INFO, 0,
                                     "does not follow a call"),
    # leaf's saved rbp points at itself: level1 is still right (its return
    # address is intact), then level1's rbp is below its own sp.
    "saved frame pointer points at itself": (damage_record(0, lambda r: r[X86.fp]),
                                             StopReason.CFA_NOT_INCREASING, 1, "does not increase"),
    "saved frame pointer unmapped": (damage_record(0, lambda r: 0x10000000), StopReason.UNREADABLE_MEMORY, 1,
                                     "cannot read"),
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_frame_pointer_check(name):
    damage, reason, recovered, words = CHECKS[name]
    w, regs, expected = x86_chain()
    damage(w, regs)
    bt = w.unwind(regs, sources=FP_ONLY)
    assert bt.stop_reason == reason, bt.stop_detail
    assert len(bt.frames) - 1 == recovered, [hex(f.pc) for f in bt.frames]
    assert pcs_and_sps(bt, X86) == expected[:recovered]
    assert words in bt.stop_detail


def test_frame_pointer_into_anonymous_code_is_not_stack_memory():
    """rbp pointing into an unnamed executable mapping (JIT code) is no frame record: the walk ends
    as no-unwind-info, like a frame pointer into named code, not as a bad return address."""
    w, regs, _ = x86_chain()
    w.has_jit = True
    regs[X86.fp] = JIT + 0x800
    bt = w.unwind(regs, sources=FP_ONLY)
    assert bt.stop_reason == StopReason.NO_UNWIND_INFO, bt.stop_detail
    assert "a read-only or executable mapping, which is not stack memory" in bt.stop_detail
    assert [a.kind for a in bt.attempts] == [FailureKind.NOT_STACK_MEMORY]


def test_function_without_frame_pointer_is_not_followed():
    """rbp may hold anything in code built without frame pointers: do not follow it there."""
    w, regs, _ = x86_chain()
    w.put_code(CODE + 0x300, b"\x90" * 4)          # leaf loses its `push rbp; mov rbp, rsp`
    outcome = frame_pointer.step(innermost(w, regs), w.context(FP_ONLY))
    assert outcome.status == AttemptStatus.NOT_APPLICABLE
    assert "leaf does not set up a frame pointer" in outcome.reason


def test_prologue_search_stops_at_pc():
    """The `mov rbp, rsp` must come before the frame's pc; bytes after it may be another function's."""
    w, regs, _ = x86_chain()
    w.put_code(CODE + 0x300, b"\x90" * 4)
    w.put_code(CODE + 0x320, b"\x48\x89\xe5")       # after pc 0x310: not evidence for this frame
    assert frame_pointer.sets_up_frame_pointer(w.context(), CODE + 0x300, CODE + 0x310) is False
    assert frame_pointer.sets_up_frame_pointer(w.context(), CODE + 0x300, CODE + 0x330) is True
    assert frame_pointer.sets_up_frame_pointer(w.context(), None, CODE + 0x330) is None


def test_mappings_unknown_still_reads_the_record():
    """A remote stub without mappings: the read itself is the readability check."""
    w, regs, expected = x86_chain()
    w.mappings_known = False
    bt = w.unwind(regs, sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    w, regs, _ = x86_chain()
    w.mappings_known = False
    regs[X86.fp] = 0x90000000             # above sp, so only the read can tell
    bt = w.unwind(regs, sources=FP_ONLY)
    assert bt.stop_reason == StopReason.UNREADABLE_MEMORY and "cannot read rbp" in bt.stop_detail


# -- frame-pointer: the first and last instructions of a function -----------------------

def test_at_function_entry_the_return_address_is_at_sp():
    w, regs, expected = x86_chain()
    sp = STACK_TOP - 0x2F8                          # the call just pushed the return address here
    w.word(sp, expected[0][0])
    regs = w.registers(pc=CODE + 0x300, sp=sp, fp=STACK_TOP - 0x200)    # rbp is still level1's
    bt = w.unwind(regs, sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    ev = bt.frames[1].evidence
    assert ev.found_by == "frame pointer: function entry" and ev.row == "CFA=rsp+8 => rbp=same rip=[CFA-8]"
    assert any("from symbols" in n for n in ev.notes)


def test_after_endbr64_is_still_the_entry():
    w, regs, expected = x86_chain()
    w.put_code(CODE + 0x300, b"\xf3\x0f\x1e\xfa\x55\x48\x89\xe5")
    sp = STACK_TOP - 0x2F8
    w.word(sp, expected[0][0])
    bt = w.unwind(w.registers(pc=CODE + 0x304, sp=sp, fp=STACK_TOP - 0x200), sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected


def test_after_push_before_mov_the_saved_rbp_is_at_sp():
    w, regs, expected = x86_chain()
    sp = STACK_TOP - 0x300                          # push rbp done: saved rbp at sp, return address above
    bt = w.unwind(w.registers(pc=CODE + 0x301, sp=sp, fp=STACK_TOP - 0x200), sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    assert bt.frames[1].evidence.found_by == "frame pointer: frame record being built"
    assert bt.frames[1].evidence.row == "CFA=rsp+16 => rbp=[CFA-16] rip=[CFA-8]"


def test_at_ret_the_return_address_is_at_sp():
    w, regs, expected = x86_chain()
    w.put_code(CODE + 0x3F0, b"\xc3")
    sp = STACK_TOP - 0x2F8
    bt = w.unwind(w.registers(pc=CODE + 0x3F0, sp=sp, fp=STACK_TOP - 0x200), sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    assert bt.frames[1].evidence.found_by == "frame pointer: function exit"


def test_entry_of_code_without_symbols_is_recognised_by_its_bytes():
    w, _, expected = x86_chain()
    w.jit[0x40:0x44] = b"\x55\x48\x89\xe5"
    w.has_jit = True
    sp = STACK_TOP - 0x2F8
    w.word(sp, expected[0][0])
    bt = w.unwind(w.registers(pc=JIT + 0x40, sp=sp, fp=STACK_TOP - 0x200), sources=FP_ONLY)
    assert pcs_and_sps(bt, X86) == expected
    assert "no symbol here" in " ".join(bt.frames[1].evidence.notes)


def test_return_addresses_never_use_the_entry_rule():
    """A caller's pc is after a call: its prologue has run, even if pc happens to be a function start."""
    w, regs, _ = x86_chain()
    w.put_code(CODE + 0x300, b"\x90" * 4)
    frame = innermost(w, w.registers(pc=CODE + 0x301, sp=STACK_TOP - 0x2F8, fp=STACK_TOP - 0x200), exact=False)
    assert frame_pointer.prologue_row(frame, w.context(), ("leaf", CODE + 0x300)) is None


def test_aarch64_entry_exit_and_half_built_record():
    w = World(A64)
    w.function("main", 0x100, 0x100)
    w.function("leaf", 0x200, 0x100)
    ra = w.call_at(0x120)
    sp, x29 = STACK_TOP - 0x200, STACK_TOP - 0x100
    # at entry: the return address is in x30 and sp is the CFA
    bt = w.unwind(w.registers(pc=CODE + 0x200, sp=sp, fp=x29, x30=ra), sources=FP_ONLY, max_frames=2)
    assert pcs_and_sps(bt, A64) == [(ra, sp)]
    assert bt.frames[1].evidence.found_by == "frame pointer: function entry"
    # at ret
    w.put_code(CODE + 0x2F0, (0xD65F03C0).to_bytes(4, "little"))
    bt = w.unwind(w.registers(pc=CODE + 0x2F0, sp=sp, fp=x29, x30=ra), sources=FP_ONLY, max_frames=2)
    assert pcs_and_sps(bt, A64) == [(ra, sp)]
    # after `stp x29, x30, [sp, #-16]!`, at `mov x29, sp`: the record is at sp
    w.record(sp - 16, x29, ra)
    bt = w.unwind(w.registers(pc=CODE + 0x204, sp=sp - 16, fp=x29, x30=0), sources=FP_ONLY, max_frames=2)
    assert pcs_and_sps(bt, A64) == [(ra, sp)]
    assert bt.frames[1].registers[A64.fp] == x29


SYSCALL_THEN_TEST = b"\x0f\x05\x48\x85\xc0\x7c\x1b"     # syscall; test rax, rax; jl +0x1b


def clone_world(name="__clone3"):
    """A thread-creating wrapper with `syscall` at +0x10, called from create_thread."""
    w = World(X86)
    w.function("create_thread", 0x100, 0x100, frame_pointer=False)
    w.function(name, 0x000, 0x100, frame_pointer=False)
    w.put_code(CODE + 0x10, SYSCALL_THEN_TEST)
    ra = w.call_at(0x140)
    sp = STACK_TOP - 0x40
    w.word(sp, ra)
    return w, sp, ra


@pytest.mark.parametrize("name", ["clone", "__clone3", "__GI___clone3"])
@pytest.mark.parametrize("after", [2, 5, 7])      # after the syscall, the test, the jl
@pytest.mark.parametrize("source", [frame_pointer, scan])
def test_child_side_of_clone_is_outermost_from_its_registers(name, after, source):
    w, sp, _ = clone_world(name)
    regs = w.registers(pc=CODE + 0x10 + after, sp=sp, fp=0, rax=0)
    outcome = source.step(innermost(w, regs), w.context())
    assert outcome.status == AttemptStatus.RECOVERED and outcome.outermost
    assert outcome.reason.startswith("child side of %s: " % name)
    assert "rax = 0" in outcome.reason and "0x%x" % (CODE + 0x10) in outcome.reason


@pytest.mark.parametrize("rax", [0x5123, 2 ** 64 - 11])     # the child's id; -EAGAIN
def test_parent_side_of_clone_walks_on(rax):
    w, sp, ra = clone_world()
    regs = w.registers(pc=CODE + 0x12, sp=sp, fp=0, rax=rax)
    bt = w.unwind(regs, sources=BOTH, max_frames=2)
    assert [(f.pc, f.function) for f in bt.frames] == [(CODE + 0x12, "__clone3"), (ra, "create_thread")]
    assert bt.frames[1].method == "scan"


@pytest.mark.parametrize("name", ["_start", "clone3", "__GI___clone3"])
def test_a_name_alone_is_no_outermost_evidence(name):
    w = World(X86)
    w.function(name, 0x000, 0x100, frame_pointer=False)
    regs = w.registers(pc=CODE + 0x15, sp=STACK_TOP - 0x40, fp=0, rax=0)   # no syscall before pc
    for source in (frame_pointer, scan):
        outcome = source.step(innermost(w, regs), w.context())
        assert not (outcome.status == AttemptStatus.RECOVERED and outcome.outermost
                    and name in outcome.reason), outcome.reason
    # not exact (a return address): no register tells the child side
    w.put_code(CODE + 0x13, SYSCALL_THEN_TEST[:2])
    frame = innermost(w, regs, exact=False)
    assert frame_pointer.outermost_child_of_clone(frame, w.context(), "scan") is None


# -- scan --------------------------------------------------------------------------

def scan_world():
    """leaf (no frame pointer) called by level1; the stack above sp holds decoys, then the return address."""
    w = World(X86)
    w.function("_start", 0x000, 0x100, frame_pointer=False)
    w.function("level1", 0x200, 0x100, frame_pointer=False)
    w.function("leaf", 0x300, 0x100, frame_pointer=False)
    w.put_code(CODE + 0x300, b"\x55\x53")   # push rbp; push rbx: rbp is saved, then free for other uses
    ra_start = w.call_at(0x010)
    ra = w.call_at(0x220)
    unnamed = w.call_at(0x1800)             # after a call, but no symbol covers it
    sp = STACK_TOP - 0x400
    decoys = [0x1234, DATA + 8, CODE + 0x250, unnamed, 0]
    for i, value in enumerate(decoys):
        w.word(sp + 8 * i, value)
    slot = sp + 8 * len(decoys)
    w.word(slot, ra)
    w.word(STACK_TOP - 0x100, ra_start)
    return w, w.registers(pc=CODE + 0x310, sp=sp, fp=0x77), slot, ra, ra_start


def test_scan_takes_the_first_plausible_return_address_and_lists_what_it_skipped():
    w, regs, slot, ra, _ = scan_world()
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.status == AttemptStatus.RECOVERED
    # leaf keeps no frame pointer, so its rbp (0x77) says nothing about the caller's
    assert outcome.registers == {X86.pc: ra, X86.sp: slot + 8}
    ev = outcome.evidence
    assert ev.found_by == "stack scan: return address at [rsp+0x28]"
    assert ev.row == "CFA=rsp+48 => rbp=undefined rip=[CFA-8]"
    assert (ev.entry["slot"], ev.entry["call"], ev.entry["caller_function"]) == (slot, "call rel32", "level1")
    assert ev.entry["skipped_not_code"] == 3 and ev.entry["skipped_code_pointers"] == 2
    notes = "\n".join(ev.notes)
    assert "skipped [sp+0x10] = 0x400250: code, but not right after a call instruction" in notes
    assert "skipped [sp+0x18] = 0x401805: follows a call rel32, but no function symbol of prog covers it" in notes
    assert "3 words that are not addresses of code" in notes


def test_scan_needs_a_symbol_only_where_the_module_has_a_symbol_table():
    """In a stripped library (only .dynsym) an unnamed return address is still taken."""
    w, regs, slot, ra, _ = scan_world()
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY, symbol_table=False))
    assert outcome.status == AttemptStatus.RECOVERED and outcome.evidence.entry["slot"] == slot - 16
    assert outcome.evidence.entry["caller_function"] is None


def test_scan_walk_reaches_start():
    w, regs, slot, ra, ra_start = scan_world()
    bt = w.unwind(regs, sources=SCAN_ONLY)
    assert [f.pc for f in bt.frames[1:]] == [ra, ra_start]
    assert [f.method for f in bt.frames[1:]] == ["scan", "scan"]
    assert bt.frames[2].registers[X86.sp] == STACK_TOP - 0xF8
    assert bt.stop_reason == StopReason.OUTERMOST


@pytest.mark.parametrize("form, call", [("reg", "call r/m"), ("rip", "call r/m"), ("r11", "call r/m"),
                                        ("rel32", "call rel32")])
def test_scan_accepts_every_call_form(form, call):
    w, regs, slot, _, _ = scan_world()
    ra = w.call_at(0x240, form)
    w.word(slot, ra)
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.registers[X86.pc] == ra and outcome.evidence.entry["call"] == call


def test_scan_accepts_jit_code_without_a_symbol():
    w, regs, slot, _, _ = scan_world()
    ra = w.call_at(0x80, "reg", where="jit")
    w.word(slot, ra)
    bt = w.unwind(regs, sources=SCAN_ONLY, max_frames=2)
    jit_frame = bt.frames[1]
    assert jit_frame.pc == ra and jit_frame.module is None
    assert jit_frame.function == "<jit code in anonymous mapping 0x%x>" % JIT
    assert "code outside every module" in " ".join(jit_frame.evidence.notes)


def test_scan_window_is_bounded_and_configurable():
    w, regs, slot, ra, _ = scan_world()
    far = STACK_TOP - 0x400 + 8 * 40
    w.word(slot, 0)
    w.word(far, ra)
    short = scan.step(innermost(w, regs), w.context(SCAN_ONLY, scan_words=16))
    assert short.status == AttemptStatus.FAILED and "no return address in the 16 words" in short.reason
    wide = scan.step(innermost(w, regs), w.context(SCAN_ONLY, scan_words=64))
    assert wide.status == AttemptStatus.RECOVERED and wide.registers[X86.pc] == ra


def test_scan_window_setting_comes_from_the_target():
    w, regs, slot, ra, _ = scan_world()
    target = w.target()
    target.scan_words = 3
    ctx = engine.UnwindContext(target, w.module_map(target), SCAN_ONLY)
    assert ctx.scan_words == 3
    assert engine.UnwindContext(w.target(), None, SCAN_ONLY).scan_words == engine.DEFAULT_SCAN_WORDS


def test_nothing_up_to_the_top_of_the_stack_means_outermost():
    """A thread's last frame without symbols: every word above it was read and none is a return address."""
    w, regs, _, _, _ = scan_world()
    regs[X86.sp] = STACK_TOP - 0x40
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.status == AttemptStatus.RECOVERED and outcome.outermost
    assert "top of the stack at 0x%x" % STACK_TOP in outcome.reason
    bt = w.unwind(regs, sources=SCAN_ONLY)
    assert bt.stop_reason == StopReason.OUTERMOST and len(bt.frames) == 1


def test_scan_without_mappings_stops_where_memory_ends():
    w, regs, _, _, _ = scan_world()
    w.mappings_known = False
    regs[X86.sp] = STACK_TOP - 0x40
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.status == AttemptStatus.FAILED and "unreadable" in outcome.reason
    regs[X86.sp] = 0x10000000
    bt = w.unwind(regs, sources=SCAN_ONLY)
    assert bt.stop_reason == StopReason.UNREADABLE_MEMORY


def test_scan_refuses_a_misaligned_stack_pointer():
    w, regs, _, _, _ = scan_world()
    regs[X86.sp] += 4
    bt = w.unwind(regs, sources=SCAN_ONLY)
    assert bt.stop_reason == StopReason.MISALIGNED_STACK and "not aligned to 8 bytes" in bt.stop_detail


def test_scan_restores_the_frame_pointer_from_a_frame_record():
    """When the callee's frame pointer points just below the slot, that word is the caller's rbp."""
    w, regs, slot, ra, _ = scan_world()
    w.word(slot - 8, 0xABC0)
    regs[X86.fp] = slot - 8
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.registers[X86.fp] == 0xABC0
    assert outcome.evidence.row == "CFA=rsp+48 => rbp=[CFA-16] rip=[CFA-8]"


def test_scan_repairs_the_frame_pointer_below_a_function_that_keeps_one():
    """The callee sets up rbp but its rbp value is junk (it came from a scanned frame): its record
    still sits right below its return address."""
    w, regs, slot, ra, _ = scan_world()
    w.put_code(CODE + 0x300, b"\x55\x48\x89\xe5")
    w.word(slot - 8, 0xABC0)
    outcome = scan.step(innermost(w, regs, exact=False), w.context(SCAN_ONLY))
    assert outcome.registers[X86.fp] == 0xABC0
    assert "leaf keeps a frame pointer" in " ".join(outcome.evidence.notes)


def test_scan_keeps_the_frame_pointer_of_a_callee_that_never_saves_it():
    w, regs, slot, ra, _ = scan_world()
    w.put_code(CODE + 0x300, b"\x53\x90")   # push rbx only
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.registers[X86.fp] == 0x77
    assert "neither keeps nor saves rbp" in " ".join(outcome.evidence.notes)


def test_scan_keeps_the_frame_pointer_when_nothing_tells():
    """Code without symbols (JIT): rbp is assumed unchanged, as Breakpad does."""
    w, regs, slot, ra, _ = scan_world()
    w.has_jit = True
    regs[X86.pc] = JIT + 0x100
    outcome = scan.step(innermost(w, regs), w.context(SCAN_ONLY))
    assert outcome.registers[X86.fp] == 0x77
    assert outcome.evidence.row == "CFA=rsp+48 => rbp=same rip=[CFA-8]"


def test_aarch64_scan_needs_bl_or_blr():
    w = World(A64)
    w.function("level1", 0x200, 0x100, frame_pointer=False)
    ra = w.call_at(0x220)
    sp = STACK_TOP - 0x400
    w.word(sp, CODE + 0x250)            # code, but a nop before it
    w.word(sp + 8, ra)                  # right after a bl
    outcome = scan.step(innermost(w, w.registers(pc=CODE + 0x300, sp=sp)), w.context(SCAN_ONLY))
    assert outcome.registers[A64.pc] == ra and outcome.evidence.entry["call"] == "bl"
    misaligned = scan.step(innermost(w, w.registers(pc=CODE + 0x300, sp=sp + 8)), w.context(SCAN_ONLY))
    assert misaligned.status == AttemptStatus.FAILED and "not aligned to 16 bytes" in misaligned.reason


def test_frame_pointer_then_scan_through_code_without_frame_pointers():
    """leaf keeps no frame pointer (its rbp is junk): frame-pointer declines, scan finds the caller."""
    w, regs, slot, ra, ra_start = scan_world()
    bt = w.unwind(regs, sources=BOTH)
    assert [f.pc for f in bt.frames[1:]] == [ra, ra_start]
    assert bt.frames[1].method == "scan"
    tried = bt.frames[1].attempts[0]
    assert tried.source == "frame-pointer" and tried.outcome == AttemptStatus.NOT_APPLICABLE
    assert "leaf does not set up a frame pointer" in tried.reason


# -- the engine: order, gating, settings ----------------------------------------------

def test_default_order_is_tables_then_frame_pointer_then_scan():
    order = engine.DEFAULT_SOURCES
    assert order[0] == "cfi" and order[-2:] == ("frame-pointer", "scan")
    assert engine.parse_sources("scan, frame-pointer") == ("scan", "frame-pointer")
    with pytest.raises(ValueError):
        engine.parse_sources("frame-pointer,stack")


def fake_table(result):
    """A table source that found a row for every pc and gives `result` (a return address or a failure)."""
    def step(frame, ctx):
        evidence = StepEvidence(source="cfi", found_by="fake table", lookup_pc=frame.pc)
        evidence.rule = Row(address=frame.pc, cfa=CfaRule("register", register=X86.sp, offset=8))
        evidence.arch = ctx.arch
        evidence.cfa = frame.registers[X86.sp] + 8
        if result == "unreadable":
            return Outcome.failed("cfi", "cannot read rip at 0x10", FailureKind.UNREADABLE_MEMORY,
                                  evidence=evidence)
        return Outcome(AttemptStatus.RECOVERED, "cfi", registers={X86.pc: result, X86.sp: evidence.cfa},
                       evidence=evidence)
    return step


@pytest.mark.parametrize("result, reason", [(DATA + 8, StopReason.RETURN_ADDRESS_NOT_CODE),
                                            ("unreadable", StopReason.UNREADABLE_MEMORY)])
def test_fallbacks_do_not_guess_past_damage_a_table_found(monkeypatch, result, reason):
    monkeypatch.setitem(engine.STRATEGIES, "cfi", fake_table(result))
    w, regs, _ = x86_chain()
    bt = w.unwind(regs, sources=("cfi",) + BOTH)
    assert bt.stop_reason == reason
    assert len(bt.frames) == 1
    assert [(a.source, a.outcome) for a in bt.attempts] == [
        ("cfi", "rejected" if reason == StopReason.RETURN_ADDRESS_NOT_CODE else AttemptStatus.FAILED),
        ("frame-pointer", AttemptStatus.SKIPPED), ("scan", AttemptStatus.SKIPPED)]


def test_fallbacks_answer_where_no_table_covers_the_pc(monkeypatch):
    monkeypatch.setitem(engine.STRATEGIES, "cfi", lambda frame, ctx: Outcome.not_applicable("cfi", "no FDE"))
    w, regs, expected = x86_chain()
    bt = w.unwind(regs, sources=("cfi",) + BOTH)
    assert pcs_and_sps(bt, X86) == expected
    assert bt.frames[1].attempts[0].outcome == AttemptStatus.NOT_APPLICABLE


def test_depth_limit_ends_a_long_chain():
    w = World(X86)
    w.function("recurse", 0x100, 0x100)
    ra = w.call_at(0x140)
    top = STACK_TOP - 0x20
    records = [top - 0x20 * i for i in range(100)]
    for callee, caller in zip(records[1:], records):
        w.record(callee, caller, ra)
    w.record(records[0], 0, 0)
    bt = w.unwind(w.registers(pc=CODE + 0x150, sp=records[-1] - 0x10, fp=records[-1]), sources=FP_ONLY,
                  max_frames=10)
    assert bt.stop_reason == StopReason.DEPTH_LIMIT and len(bt.frames) == 10
    bt = w.unwind(w.registers(pc=CODE + 0x150, sp=records[-1] - 0x10, fp=records[-1]), sources=FP_ONLY)
    assert bt.stop_reason == StopReason.PC_ZERO and len(bt.frames) == 100


def test_stop_words_name_every_reason():
    reasons = [StopReason.OUTERMOST, StopReason.PC_ZERO, StopReason.CFA_NOT_INCREASING, StopReason.REPEATED_FRAME,
               StopReason.UNREADABLE_MEMORY, StopReason.DEPTH_LIMIT, StopReason.NO_UNWIND_INFO,
               StopReason.RETURN_ADDRESS_NOT_CODE, StopReason.MISALIGNED_STACK]
    assert all(r.description for r in reasons)
    assert StopReason.MISALIGNED_STACK == "misaligned-stack"


def test_code_outside_every_mapping_is_not_named_jit():
    w, regs, _ = x86_chain()
    ctx = w.context()
    assert engine.jit_name(ctx, DATA + 8) is None
    assert engine.jit_name(ctx, STACK + 8) is None


# -- the offline command: --sources ---------------------------------------------------

def test_offline_tables_take_a_source_list():
    import json
    import subprocess
    import sys

    from support import ROOT, build
    binary = build("jit.c", ["-O0"])

    def tables(*options):
        return subprocess.run([sys.executable, "-m", "plugin", "tables", str(binary), "--json", *options],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    everything = json.loads(tables().stdout)["sources"]
    assert {s["kind"] for s in everything} >= {"cfi"}
    cfi_only = [s for s in everything if s["kind"] == "cfi"]
    assert json.loads(tables("--sources", "cfi").stdout)["sources"] == cfi_only
    assert json.loads(tables("--sources", "frame-pointer,scan").stdout)["sources"] == []
    bad = tables("--sources", "frame-pointer,stack")
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "unknown source 'stack'" in bad.stderr
