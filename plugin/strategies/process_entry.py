"""The process's first frame: the entry code of a program or of its dynamic loader.

The kernel starts a process at an ELF entry point (ld.so's `_start`, or the
program's own when it is static); the program's `_start` is then entered by
a jump, not a call. Neither is called by anyone: a frame whose return
address is the end of the first call its module's entry code makes (glibc's
`_start`: `call __libc_start_main`, `blx __libc_start_main`, ld.so's `blx
_dl_start`) is the outermost one, and whatever lies above it on the stack
(argc, argv, the environment, the auxiliary vector) is no return address.
A table covering the entry code (x86_64's CFI marks the return address
undefined) says the same first; this rule serves code without tables.
"""
from __future__ import annotations

from typing import Optional

from plugin.analysis.ops import Flow
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import elf
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome

ENTRY_CODE = 64           # bytes of entry code read for its first call


def entry_point(ctx, module) -> Optional[int]:
    """The module's ELF entry point in the process (bit 0 set: Thumb code), or None."""
    if module is None or module.format != "elf":
        return None
    try:
        header = elf.parse_header(bytes(ctx.read_memory(module.header_address, elf.HEADER_SIZE)))
    except (DecodeError, MemoryReadError):
        return None
    return header.entry + module.load_bias if header.entry else None


def first_call_end(ctx, entry) -> Optional[int]:
    """Where the first call of the entry code at `entry` returns to, or None."""
    from plugin.strategies.function_start import code_of      # function_start imports this module's users
    code = code_of(ctx, entry & ~1, bool(entry & 1) and ctx.arch.name == "arm")
    address = entry & ~1
    while address < (entry & ~1) + ENTRY_CODE:
        try:
            insn = code.decode_at(address)
        except (DecodeError, MemoryReadError):
            return None
        if insn is None or insn.flow in (Flow.RET, Flow.STOP, Flow.JUMP, Flow.INDIRECT):
            return None
        if insn.flow == Flow.CALL:
            return insn.end
        address = insn.end
    return None


def outermost(frame, ctx, source) -> Optional[Outcome]:
    """An outermost Outcome for a caller frame returning to its module's entry code's first call."""
    if frame.exact_pc or ctx.arch.name not in ("arm", "i386", "x86_64", "aarch64"):
        return None
    pc = frame.pc & ~1 if ctx.arch.name == "arm" else frame.pc
    module = ctx.modules.find(pc - 1)
    entry = entry_point(ctx, module)
    if entry is None or not 0 < pc - (entry & ~1) <= ENTRY_CODE or first_call_end(ctx, entry) != pc:
        return None
    reason = ("0x%x returns from the first call of %s's entry code at 0x%x: the kernel started that code, "
              "no one called it: outermost frame" % (pc, module.name, entry & ~1))
    evidence = StepEvidence(source=source, found_by="%s: the process's entry code" % source,
                            lookup_pc=pc - 1, module=module.name, section="code",
                            section_address=entry & ~1, entry={"entry_point": entry & ~1})
    evidence.notes.append(reason)
    return Outcome(AttemptStatus.RECOVERED, source, reason, evidence=evidence, outermost=True)
