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

The entry code also names main: it hands main's address to
__libc_start_main (main_from_entry), a function start for the analysis
where no symbol gives one.
"""
from __future__ import annotations

from typing import Optional, Tuple

from plugin.analysis.ops import Flow, immediate, operands
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import elf
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome
from plugin.modules.module import ModuleFormat

ENTRY_CODE = 64           # bytes of entry code read for its first call, or for main's address
LEA_RDI, MOV_RDI = b"\x48\x8d\x3d", b"\x48\xc7\xc7"     # lea disp32(%rip), %rdi; mov $imm32, %rdi


def entry_point(ctx, module) -> Optional[int]:
    """The module's ELF entry point in the process (bit 0 set: Thumb code), or None."""
    if module is None or module.format != ModuleFormat.ELF:
        return None
    try:
        header = elf.parse_header(bytes(ctx.read_memory(module.header_address, elf.HEADER_SIZE)))
    except (DecodeError, MemoryReadError):
        return None
    return header.entry + module.load_bias if header.entry else None


def first_call_end(ctx, entry) -> Optional[int]:
    """Where the first call of the entry code at `entry` returns to, or None."""
    code = _code_of(ctx, entry & ~1, bool(entry & 1) and ctx.arch.name == "arm")
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


def _code_of(ctx, address, thumb):
    from plugin.strategies.function_start import code_of      # function_start imports this module
    return code_of(ctx, address, thumb)


def main_from_entry(ctx, pc) -> Optional[Tuple[int, int, str]]:
    """(main, the entry point, the instruction naming main) of the x86_64 or 32-bit Arm ELF program
    holding pc: its entry code (glibc's _start) loads main's address into the first argument of
    __libc_start_main: on x86_64 rdi, with `lea disp32(%rip), %rdi` or `mov $imm32, %rdi`; on Arm
    r0 (_arm_main_from_entry); None otherwise."""
    module = ctx.modules.find(pc)
    if module is None or module.format != ModuleFormat.ELF or ctx.arch.name not in ("x86_64", "arm"):
        return None
    if ctx.arch.name == "arm":
        return _arm_main_from_entry(ctx, module)
    try:
        header = bytes(ctx.read_memory(module.header_address, 32))
        if header[:5] != b"\x7fELF\x02":
            return None
        entry = int.from_bytes(header[24:32], "little") + module.load_bias
        code = bytes(ctx.read_memory(entry, ENTRY_CODE))
    except Exception:           # unreadable: no start from the entry
        return None
    at = code.find(LEA_RDI)
    if at >= 0 and at + 7 <= len(code):
        return entry + at + 7 + int.from_bytes(code[at + 3:at + 7], "little", signed=True), entry, \
            "lea disp32(%rip), %rdi"
    at = code.find(MOV_RDI)
    if at >= 0 and at + 7 <= len(code):
        return int.from_bytes(code[at + 3:at + 7], "little") + module.load_bias, entry, "mov $imm32, %rdi"
    return None


def _arm_main_from_entry(ctx, module) -> Optional[Tuple[int, int, str]]:
    """glibc's Arm _start (sysdeps/arm/start.S), up to its first call (`blx __libc_start_main`):
    PIC: `ldr sl, L; adr r3, L; add sl, r3` (sl = the GOT), `ldr r0, L+4; ldr r0, [sl, r0]` (main's
    GOT slot); not PIC: `ldr r0, =main`. Literal loads, pc-relative addresses, register adds and
    the load through them are followed; r0 at the call is main (bit 0: Thumb, cleared)."""
    entry = entry_point(ctx, module)
    if entry is None:
        return None
    try:
        code = _code_of(ctx, entry & ~1, bool(entry & 1))
        values, address, named = {}, entry & ~1, None
        while address < (entry & ~1) + ENTRY_CODE:
            insn = code.decode_at(address)
            if insn is None:
                return None
            if insn.flow == Flow.CALL:
                main = values.get("r0")
                return (main & ~1, entry & ~1, named) if main else None
            _arm_entry_value(ctx, insn, values, 4 if entry & 1 else 8)
            named = insn.text if values.get("r0") and insn.text.split(" ", 1)[-1].startswith("r0") else named
            address = insn.end
    except (DecodeError, MemoryReadError):
        return None
    return None


def _arm_entry_value(ctx, insn, values, pc_ahead):
    """Follow one instruction of _start in `values` (register name -> known value)."""
    mnemonic, _, rest = insn.text.partition(" ")
    mnemonic = mnemonic.split(".")[0]
    ops = operands(rest)
    if not ops:
        return
    here = ((insn.address + pc_ahead) & ~3)
    value = None
    if mnemonic == "ldr" and len(ops) == 2 and ops[1].startswith("[pc"):
        k = immediate(ops[1].strip("[]").split(",")[1]) if "," in ops[1] else 0
        value = int.from_bytes(bytes(ctx.read_memory(here + k, 4)), "little") if k is not None else None
    elif mnemonic == "adr" and len(ops) == 2:
        k = immediate(ops[1])
        value = here + k if k is not None else None
    elif mnemonic == "add" and len(ops) in (2, 3) and all(o in values for o in ops[-2:]):
        value = (values[ops[-2]] + values[ops[-1]]) & 0xffffffff
    elif mnemonic == "ldr" and len(ops) == 2 and ops[1].startswith("["):
        parts = [p.strip() for p in ops[1].strip("[]").split(",")]
        if len(parts) == 2 and all(p in values for p in parts):
            value = int.from_bytes(bytes(ctx.read_memory((values[parts[0]] + values[parts[1]]) & 0xffffffff, 4)),
                                   "little")
    values.pop(ops[0], None)
    if value is not None:
        values[ops[0]] = value
