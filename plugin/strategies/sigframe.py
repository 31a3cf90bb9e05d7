"""Signal trampolines: recognised return addresses, and the signal frame they start.

The kernel delivers a signal by building a signal frame on the stack (the
interrupted registers in a ucontext/sigcontext) and "calling" the handler
with a return address it planted: the signal trampoline, whose code is a
sigreturn system call. No call instruction precedes that address, so the
checks that want a return address to follow a call accept it when it is
recognised here, in this order:

  code     the bytes at the address are the architecture's sigreturn
           sequence (plugin/arch: x86_64 `mov rax, 15; syscall`, i386 both
           forms, aarch64 `mov x8, #139; svc #0`);
  table    an FDE whose CIE has the 'S' augmentation starts there (or one
           instruction before: glibc and the kernel put a nop ahead of the
           trampoline so that a lookup at pc-1 still lands in its FDE);
  symbol   a vDSO symbol that names a sigreturn trampoline.

The frame whose pc is a trampoline is a signal frame. A table covering it
(glibc's __restore_rt, the vDSO) unwinds it through the table sources;
where none does (qemu-user's trampoline page, a stripped libc), `step`
unwinds it by the kernel's layout: every register of the interrupted frame
read from the saved context at sp + the arch's offset, the interrupted
frame then looked up at its exact pc.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from plugin.arch import SigReturn, reader
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.model.vocabulary import Found, Vocabulary
from plugin.strategies.evaluate import RowError, evaluate_row

# vDSO symbols of sigreturn trampolines (aarch64, i386, x86_64 vDSO conventions).
VDSO_SIGRETURN_SYMBOLS = ("__kernel_rt_sigreturn", "__kernel_sigreturn", "__vdso_rt_sigreturn",
                          "__vdso_sigreturn")


class RecognisedBy(Vocabulary):
    """How a signal trampoline was recognised."""
    CODE = ("code", "its code is a sigreturn system call")
    TABLE = ("table", "an FDE with the 'S' (signal frame) augmentation starts there")
    SYMBOL = ("symbol", "a vDSO symbol names it")


@dataclass(frozen=True)
class Trampoline(Found):
    """A signal trampoline (by: a RecognisedBy; why names the code, FDE or symbol)."""
    sigreturn: Optional[SigReturn] = None   # the kernel layout, when the code matched


def recognise(ctx, address: int) -> Optional[Trampoline]:
    """The signal trampoline starting at address, or None (kept in ctx.signal_trampolines)."""
    return ctx.signal_trampolines.for_generation(ctx.target.generation).lookup(address, _recognised, ctx, address)


def _recognised(ctx, address):
    try:
        return _recognise(ctx, address)
    except Exception:       # recognition only helps; unreadable or undecodable means "not one"
        return None


def _recognise(ctx, address):
    arch = ctx.arch
    if not address:
        return None
    sigreturn = arch.sigreturn_at(reader(ctx.read_memory), address)
    if sigreturn is not None:
        return Trampoline(address, RecognisedBy.CODE, "the code at 0x%x is `%s`" % (address, sigreturn.text),
                          sigreturn)
    module = ctx.modules.find(address)
    if module is None:
        return None
    if "cfi" in ctx.sources:
        from plugin.strategies.cfi import CfiTables
        hit = CfiTables.of(module, ctx.target).lookup(address)
        if hit is not None and hit.signal_frame and address - hit.fde.start in (0, arch.min_instruction_size):
            return Trampoline(address, RecognisedBy.TABLE, "the FDE at 0x%x of %s (augmentation %r) starts at 0x%x"
                              % (hit.fde.offset, hit.section_name, hit.fde.cie.augmentation, hit.fde.start), None)
    if "vdso" in (module.name or "") or module.path is None:
        found = ctx.symbol(address)
        if found is not None and found[1] == address and found[0] in VDSO_SIGRETURN_SYMBOLS:
            return Trampoline(address, RecognisedBy.SYMBOL, "%s names 0x%x in %s" % (found[0], address, module.name),
                              None)
    return None


def at_trampoline(frame, ctx) -> Optional[Trampoline]:
    """The trampoline the frame's pc starts (it returned into it, or stopped there), with a known layout, or None."""
    found = recognise(ctx, frame.pc)
    return found if found is not None and found.sigreturn is not None else None


def layout_row(arch, pc: int, sigreturn: SigReturn) -> Row:
    """CFA = sp + the saved context's offset; every register = [CFA + its slot]."""
    return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=sigreturn.context),
               registers={n: Rule(RuleKind.OFFSET, offset=k) for n, k in sigreturn.saved.items()})


def step(frame, ctx, source: str, trampoline: Trampoline) -> Outcome:
    """The interrupted frame's registers, read from the signal frame the kernel built."""
    arch = ctx.arch
    row = layout_row(arch, frame.pc, trampoline.sigreturn)
    module = ctx.modules.find(frame.pc)
    evidence = StepEvidence(source=source, found_by="signal frame (kernel layout)", lookup_pc=frame.pc,
                            module=module.name if module else None, section="signal frame on the stack",
                            section_address=frame.registers.get(arch.sp),
                            entry={"trampoline": trampoline.address, "recognised_by": trampoline.by.value,
                                   "code": trampoline.sigreturn.text})
    evidence.rule, evidence.arch = row, arch
    evidence.notes.append("signal trampoline: %s" % trampoline.why)
    evidence.notes.append("no table covers it: the interrupted registers are read from the context the "
                          "kernel saved at sp+%d" % trampoline.sigreturn.context)
    try:
        result = evaluate_row(row, arch, frame.registers, ctx.read_memory)
    except RowError as exc:
        evidence.reads = exc.reads
        return Outcome.failed(source, exc.reason, exc.kind, evidence=evidence)
    evidence.cfa, evidence.reads = result.cfa, result.reads
    caller = result.registers
    if caller.get(arch.pc) is None:
        return Outcome.failed(source, "the signal frame gives no pc", FailureKind.NO_RETURN_ADDRESS,
                              evidence=evidence)
    evidence.caller_registers = caller
    return Outcome(AttemptStatus.RECOVERED, source, registers=caller, evidence=evidence, signal_frame=True)
