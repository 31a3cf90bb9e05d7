"""Signal trampolines as return addresses, and signal frames unwound by the kernel's layout.

Hand-built processes (tests/helpers/fallback_world.py): a handler with a
frame record whose return address is a sigreturn trampoline, the kernel's
signal frame above it holding the interrupted registers at the offsets the
Linux uapi headers give (struct rt_sigframe, ucontext, sigcontext), and the
interrupted function with its own frame record. The walk must cross the
signal frame into the interrupted function at its exact pc and go on to
main, whichever fallback source does it; the encodings of the trampolines
are checked against capstone, which the project did not write.
"""

import capstone
import pytest

from plugin.arch import reader
from plugin.model.evidence import Frame
from plugin.strategies import sigframe
from plugin.validate import compare
from fallback_world import A64, CODE, I386, STACK_TOP, X86, World

TRAMPOLINE = 0x1800


def test_trampoline_encodings_are_what_capstone_reads():
    expected = {
        "x86_64": ["mov rax, 0xf", "syscall"],
        "i386": ["pop eax", "mov eax, 0x77", "int 0x80", "mov eax, 0xad", "int 0x80"],
        "aarch64": ["mov x8, #0x8b", "svc #0"],
    }
    modes = {"x86_64": (capstone.CS_ARCH_X86, capstone.CS_MODE_64),
             "i386": (capstone.CS_ARCH_X86, capstone.CS_MODE_32),
             "aarch64": (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)}
    for arch in (X86, I386, A64):
        texts = expected[arch.name]
        cs = capstone.Cs(*modes[arch.name])
        got = []
        for trampoline in arch.sigreturns:
            got += [("%s %s" % (i[2], i[3])).strip() for i in cs.disasm_lite(trampoline.code, 0)]
        assert got == texts, arch.name


def _signal_world(arch, form=-1):
    """main -> spin (interrupted) ; signal frame ; handler (stopped). Returns (world, regs, truth).

    form: which of the arch's trampolines (i386 has the sigreturn and rt_sigreturn forms)."""
    w = World(arch)
    size = arch.address_size
    ra_start, ra_main = w.start_and_main()
    w.function("spin", 0x200, 0x100)
    w.function("handler", 0x300, 0x100)
    w.put_code(CODE + TRAMPOLINE, arch.sigreturns[form].code)
    main_fp = STACK_TOP - 0x100
    spin_fp = STACK_TOP - 0x200
    w.record(main_fp, 0, ra_start)
    w.record(spin_fp, main_fp, ra_main)
    spin_pc, spin_sp = CODE + 0x244, spin_fp - 0x30
    # The kernel's signal frame, below the interrupted stack pointer.
    tramp_sp = spin_sp - 0x1000
    layout = arch.sigreturns[form]
    context = tramp_sp + layout.context
    saved = {arch.pc: spin_pc, arch.sp: spin_sp, arch.fp: spin_fp}
    for number, offset in layout.saved.items():
        w.word(context + offset, saved.get(number, 0x1000 + number))
    # The handler's frame record (its return address: the trampoline).
    handler_fp = tramp_sp - 2 * size      # its record holds the trampoline as return address
    w.record(handler_fp, 0x4242 * size, CODE + TRAMPOLINE)
    regs = w.registers(pc=CODE + 0x320, sp=handler_fp - 0x40, fp=handler_fp)
    handler_cfa = handler_fp + 2 * size
    truth = [(CODE + TRAMPOLINE, handler_cfa), (spin_pc, spin_sp), (ra_main, spin_fp + 2 * size),
             (ra_start, main_fp + 2 * size)]
    return w, regs, truth


@pytest.mark.parametrize("arch, form", [(X86, 0), (I386, 0), (I386, 1)], ids=["x86_64", "i386-sigreturn",
                                                                            "i386-rt_sigreturn"])
@pytest.mark.parametrize("sources", [("frame-pointer",), ("frame-pointer", "scan")])
def test_frame_pointer_walk_crosses_a_signal_frame(arch, form, sources):
    w, regs, truth = _signal_world(arch, form)
    bt = w.unwind(regs, sources=sources)
    got = [(f.pc, f.registers[arch.sp]) for f in bt.frames[1:]]
    assert got == truth, [f.function for f in bt.frames]
    assert [f.function for f in bt.frames] == ["handler", None, "spin", "main", "_start"]
    trampoline, interrupted = bt.frames[1], bt.frames[2]
    assert trampoline.signal_frame and interrupted.exact_pc
    assert any("signal trampoline" in n and "follow" not in n or "planted" in n
               for n in trampoline.evidence.notes)
    assert interrupted.evidence.found_by == "signal frame (kernel layout)"
    assert interrupted.evidence.entry["recognised_by"] == "code"
    assert interrupted.evidence.entry["code"] == arch.sigreturns[form].text
    # The interrupted frame's callee-saved registers come from the saved context too.
    assert interrupted.registers[arch.callee_saved[0]] == 0x1000 + arch.callee_saved[0]


def test_aarch64_walk_crosses_a_signal_frame():
    w, regs, truth = _signal_world(A64)
    bt = w.unwind(regs, sources=("frame-pointer",))
    got = [(f.pc, f.registers[A64.sp]) for f in bt.frames[1:]]
    assert got == truth
    interrupted = bt.frames[2]
    assert interrupted.registers[30] == 0x1000 + 30            # x30 is the saved x30, not the pc
    assert interrupted.registers[A64.pc] == truth[1][0]


def test_scan_accepts_a_trampoline_as_a_return_address():
    w, regs, truth = _signal_world(X86)
    del regs[X86.fp]                      # the handler keeps no frame pointer: only the scan can find it
    w.symbols = [s for s in w.symbols if s[2] != "handler"]
    bt = w.unwind(regs, sources=("scan",))
    assert (bt.frames[1].pc, bt.frames[1].registers[X86.sp]) == truth[0]
    assert bt.frames[1].evidence.entry["call"].startswith("signal trampoline")
    assert (bt.frames[2].pc, bt.frames[2].registers[X86.sp]) == truth[1]


def test_a_return_address_that_is_not_a_trampoline_is_still_refused():
    w, regs, _ = _signal_world(X86)
    w.put_code(CODE + TRAMPOLINE, b"\x90" * 9)
    bt = w.unwind(regs, sources=("frame-pointer",))
    assert len(bt.frames) == 1
    assert "does not follow a call" in bt.stop_detail


def test_compare_accepts_the_trampoline_the_debugger_found():
    w, regs, truth = _signal_world(X86)
    ctx = w.context()
    ok, known = compare._plausible_return(CODE + TRAMPOLINE, ctx)
    assert ok and known and "rt_sigreturn" in ok
    assert compare._plausible_return(CODE + TRAMPOLINE + 1, ctx) == (None, True)


def test_recognised_by_vdso_symbol():
    w = World(A64)
    w.function("__kernel_rt_sigreturn", 0x800, 0x10, frame_pointer=False)
    target = w.target()
    ctx = w.context()
    ctx.modules.modules[0].name = "[vdso]"
    found = sigframe.recognise(ctx, CODE + 0x800)
    assert found is not None and found.by == sigframe.RecognisedBy.SYMBOL and found.sigreturn is None
    assert sigframe.recognise(ctx, CODE + 0x804) is None
    assert target is not None


def test_unreadable_signal_frame_fails_with_unreadable_memory():
    w, regs, _ = _signal_world(X86)
    ctx = w.context(sources=("frame-pointer",))
    tramp = Frame(level=1, pc=CODE + TRAMPOLINE, registers={X86.sp: STACK_TOP - 8, X86.pc: CODE + TRAMPOLINE},
                  method="frame-pointer")
    found = sigframe.at_trampoline(tramp, ctx)
    assert found is not None
    outcome = sigframe.step(tramp, ctx, "frame-pointer", found)
    assert outcome.status.value == "failed" and outcome.kind.value == "unreadable-memory"
    assert X86.sigreturn_at(reader(ctx.read_memory), CODE + TRAMPOLINE) is X86.sigreturns[0]
