"""An address in a thread's stack is never code, even when the stack is executable
(issue 19 item 8): the kernel's "[stack]", and the mapping the walked thread's sp
lies in (a thread's stack has no name)."""

from plugin import checks, engine
from plugin.model.stops import StopReason
from plugin.target import Mapping, SnapshotTarget
from fallback_world import CODE, CODE_SIZE, STACK, STACK_TOP, X86, World


def executable_stack_world(name):
    """A frame whose rbp chain leads to a return address into the (executable) stack itself."""
    w = World(X86)
    w.function("main", 0x100, 0x100)
    w.function("leaf", 0x200, 0x100)
    leaf_fp = STACK_TOP - 0x200
    planted = STACK_TOP - 0x80             # a stack address where a return address should be
    w.put_code(CODE + 0x200, b"\x55\x48\x89\xe5")
    w.record(leaf_fp, STACK_TOP - 0x100, planted)
    target = w.target()
    target = SnapshotTarget(X86, regions=[(CODE, w.code), (STACK, w.stack)],
                            mapping_list=[Mapping(CODE, CODE + CODE_SIZE, executable=True, name="/bin/prog"),
                                          Mapping(STACK, STACK_TOP, writable=True, executable=True, name=name)],
                            symbols=list(w.symbols))
    return w, target, w.registers(pc=CODE + 0x210, sp=leaf_fp - 0x10, fp=leaf_fp), planted


def test_an_executable_stack_is_not_code():
    for name in ("[stack]", ""):           # the main thread's, a thread's (named by nothing)
        w, target, regs, planted = executable_stack_world(name)
        ctx = engine.UnwindContext(target, w.module_map(target), ("frame-pointer",))
        ctx.stack_pointer = regs[X86.sp]
        assert not ctx.is_code(planted)
        assert ctx.is_code(CODE + 0x210)
        bt = engine.unwind(target, regs, sources=("frame-pointer",), modules=w.module_map(target))
        assert [f.pc for f in bt.frames] == [CODE + 0x210], name
        assert bt.stop_reason == StopReason.RETURN_ADDRESS_NOT_CODE, bt.stop_detail


def test_other_executable_anonymous_memory_is_still_code():
    w, target, regs, _ = executable_stack_world("")
    ctx = engine.UnwindContext(target, w.module_map(target), ("frame-pointer",))
    ctx.stack_pointer = None               # a context that does not know the thread's sp (GDB's unwinder)
    assert ctx.is_code(STACK_TOP - 0x80)   # an unnamed executable mapping may be JIT code


# -- across a signal frame the CFA may go down (issue 21 item 1) ---------------------

def _signal_step(cfa, caller_pc):
    from plugin.model.evidence import StepEvidence
    from plugin.model.outcome import AttemptStatus, Outcome
    evidence = StepEvidence(source="cfi", found_by=".eh_frame CFI", lookup_pc=CODE + 0x100, cfa=cfa)
    return Outcome(AttemptStatus.RECOVERED, "cfi", registers={X86.pc: caller_pc, X86.sp: cfa},
                   evidence=evidence, signal_frame=True)


def test_a_signal_frame_may_switch_to_a_lower_stack_but_not_out_of_stack_memory():
    from plugin.model.evidence import Frame
    from plugin.model.outcome import FailureKind
    w = World(X86)
    w.function("__restore_rt", 0x100, 0x10, frame_pointer=False)
    target = w.target()
    ctx = engine.UnwindContext(target, w.module_map(target), ("cfi",))
    trampoline_sp = STACK_TOP - 0x100            # the signal stack
    frame = Frame(level=1, pc=CODE + 0x100, registers={X86.sp: trampoline_sp}, method="cfi", exact_pc=True)
    lower = STACK + 0x100                        # the interrupted stack, below the signal stack
    assert checks.implausible(_signal_step(lower, CODE + 0x50), frame, ctx, trampoline_sp, STACK_TOP - 0x200) is None
    kind, why = checks.implausible(_signal_step(CODE + 0x40, CODE + 0x50), frame, ctx, trampoline_sp, None)
    assert kind == FailureKind.NOT_STACK_MEMORY and "not writable stack memory" in why
    kind, _ = checks.implausible(_signal_step(0x10, CODE + 0x50), frame, ctx, trampoline_sp, None)
    assert kind == FailureKind.UNREADABLE_MEMORY
    # not a signal frame: a lower CFA is still rejected
    plain = _signal_step(lower, CODE + 0x50)
    plain.signal_frame = False
    assert checks.implausible(plain, frame, ctx, trampoline_sp, None)[0] == FailureKind.CFA_NOT_INCREASING
