"""Where GDB's own signal-trampoline unwinder reads a signal frame other than the kernel wrote it.

Under `claim auto` the plugin's unwinder leaves a signal trampoline's frame to GDB: its sigtramp
unwinder recovers the same registers and marks the frame "<signal handler called>", which a
Python unwinder cannot. One of them reads a layout it chooses by a word of the frame:
GDB's arm-linux unwinder (arm-linux-tdep.c) takes a `sigreturn` frame for the layout of Linux
2.6.18 and later (the sigcontext in a ucontext, 20 bytes in) only where the word at sp, uc_flags,
is 0x5ac3c35a, and otherwise for the older one (the sigcontext at sp); an `rt_sigreturn` frame for
the older layout (a siginfo and a ucontext 8 bytes further on) only where the word at sp points 8
bytes on. qemu-arm writes uc_flags 0, so GDB alone reads the interrupted registers 20 bytes off and
its caller is wrong (pc 0). Where the pc GDB would read differs from the one the plugin proved
from the kernel's layout (the trampoline's code), the plugin claims the frame and says why
(unless the interrupted frame lies inner to it, on a stack below an alternate signal stack: GDB
stops at a normal frame's caller inner to it, and a Python unwinder's frames are normal ones).
"""
from __future__ import annotations

from typing import Optional

from plugin.arch import arm as arm_arch
from plugin.arch.base import reader

NEW_SIGFRAME_MAGIC = 0x5ac3c35a     # uc_flags Linux writes (2.6.18 on), which GDB tests
SIGCONTEXT_R0 = 12                  # trap_no, error_code, oldmask before r0
OLD_RT_SIGINFO = 8                  # the old rt frame: pinfo, puc, then the siginfo
OLD_RT_UCONTEXT = 8 + arm_arch.SIGINFO_SIZE


def gdb_takes(ctx, lookup: int) -> bool:
    """Does GDB's arm-linux sigtramp unwinder take the frame looked up at `lookup` (its pc, or its pc - 1,
    is a sigreturn trampoline's first instruction)? GDB puts its sigtramp unwinders before its
    tables', so no table of GDB's covers that frame; whether GDB reads it right is decided with
    the frame's stack (gdb_misreads)."""
    arch = ctx.arch
    if arch.name != "arm":
        return False
    read = reader(ctx.read_memory)
    try:
        return arch.sigreturn_at(read, lookup) is not None or arch.sigreturn_at(read, lookup + 1) is not None
    except Exception:       # unreadable code: not a trampoline GDB recognises either
        return False


def gdb_misreads(ctx, registers, pc: int, caller_pc: int) -> Optional[str]:
    """Why GDB's sigtramp unwinder would give a caller pc other than caller_pc for the trampoline frame at
    pc whose registers are `registers` (None where it gives the same, or is not modelled: every
    architecture but arm)."""
    arch = ctx.arch
    if arch.name != "arm":
        return None
    sp = registers.get(arch.sp)
    read = reader(ctx.read_memory)
    try:
        trampoline = arch.sigreturn_at(read, pc)
        if sp is None or trampoline is None:
            return None
        first = int.from_bytes(ctx.read_memory(sp, 4), "little")
        if trampoline.context == arm_arch.UCONTEXT_MCONTEXT:        # sigreturn
            new = first == NEW_SIGFRAME_MAGIC
            context = arm_arch.UCONTEXT_MCONTEXT if new else 0
            why = "uc_flags at sp 0x%x is 0x%x, not 0x%x" % (sp, first, NEW_SIGFRAME_MAGIC)
        else:                                                       # rt_sigreturn
            new = first != sp + OLD_RT_SIGINFO
            context = (arm_arch.SIGINFO_SIZE if new else OLD_RT_UCONTEXT) + arm_arch.UCONTEXT_MCONTEXT
            why = "the word at sp 0x%x points %d bytes on" % (sp, OLD_RT_SIGINFO)
        at = sp + context + SIGCONTEXT_R0 + 4 * arch.pc
        gdb_pc = int.from_bytes(ctx.read_memory(at, 4), "little")
    except Exception:       # unreadable: GDB fails there too; nothing to claim from it
        return None
    if new or (gdb_pc & ~1) == (caller_pc & ~1):
        return None
    return ("GDB's arm-linux sigtramp unwinder takes the signal frame layout of Linux before 2.6.18 "
            "(%s) and reads the interrupted pc 0x%x at 0x%x; the kernel's layout for %s puts it "
            "at 0x%x" % (why, gdb_pc, at, trampoline.text, sp + trampoline.context + SIGCONTEXT_R0 + 4 * arch.pc))
