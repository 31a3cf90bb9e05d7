"""32-bit Arm, AArch32 (DWARF for the Arm Architecture, ARM IHI 0040).

r0-r15 are DWARF 0-15 (sp = r13, lr = r14, pc = r15); the VFP/Neon
doubles d0-d31 are 256-287, iWMMXt wCGR0-7 104-111 and wR0-15 112-127.
GCC's CFI uses lr (14) as the return-address column. The frame pointer is
r11 in Arm code (r7 in Thumb code, which GDB names by number). r4-r11 are
callee-saved core registers (AAPCS 5.1.1); d8-d15 are too, but they are
64 bits wide and the core's rules read address-sized words, so they are not
listed. CPSR has no DWARF number; CPSR below is the plugin's own key for it
(outside every range AADWARF assigns), so a caller's Thumb state (bit 5,
T) can be handed to the debugger, whose Arm code asks every frame for it.
plugin.arch lists it in its tables, as it does every architecture.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from plugin.arch.base import Arch, SigReturn
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

ELF_MACHINE_ARM = 40
SP, LR, PC = 13, 14, 15
D0, WCGR0, WR0 = 256, 104, 112
CPSR = 0x1000
CPSR_THUMB = 0x20

_NAMES = {n: "r%d" % n for n in range(13)}
_NAMES.update({13: "sp", 14: "lr", 15: "pc", CPSR: "cpsr"})
for _n in range(32):
    _NAMES[D0 + _n] = "d%d" % _n
for _n in range(8):
    _NAMES[WCGR0 + _n] = "wcgr%d" % _n
for _n in range(16):
    _NAMES[WR0 + _n] = "wr%d" % _n


@dataclass(frozen=True)
class ArmArch(Arch):
    def return_to(self, ra: int, callee, caller: dict) -> int:
        """Bit 0 of a return address is the caller's instruction set (1: Thumb): the pc
        drops it and the caller's CPSR.T is set from it (when the callee's CPSR is known)."""
        cpsr = callee.get(CPSR)
        if cpsr is not None:
            caller[CPSR] = (cpsr | CPSR_THUMB) if ra & 1 else (cpsr & ~CPSR_THUMB)
        return ra & ~1

    def entry_row(self, pc: int, unchanged=(), ra_signed=False):
        """At a function's first instruction (or a call's non-code target): CFA = sp, return address in lr."""
        registers = {n: Rule(RuleKind.SAME) for n in unchanged}
        registers[self.ra] = Rule(RuleKind.SAME)
        return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=self.sp, offset=0), registers=registers)

    def call_before(self, read, address: int) -> Optional[str]:
        """The call that ends at a return address (a Thumb one may keep its bit 0): Thumb's 32-bit
        `bl`/`blx #imm` or 16-bit `blx rm`, Arm's `bl`/`blx #imm` or `blx rm`."""
        found = _call_ending_at(read, address & ~1)
        return found[0] if found else None

    def direct_call_target(self, read, address: int) -> Optional[int]:
        """The address of the code the `bl`/`blx #imm` ending at a return address calls (bit 0 clear,
        as symbols' starts are compared; the call's form says the instruction set)."""
        found = _call_ending_at(read, address & ~1)
        return found[1] if found else None


def _sign(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) else value


def _call_ending_at(read, end: int):
    """(form, target or None) of the call instruction ending at `end`, or None: the Arm and Thumb call
    patterns, declared once (ARM DDI 0406C A8.8.25 BL, BLX (immediate); A8.8.26 BLX (register))."""
    code = read(end - 4, 4)
    if code is None:
        return None
    first, second = int.from_bytes(code[:2], "little"), int.from_bytes(code[2:], "little")
    if first & 0xF800 == 0xF000 and second & 0xD000 in (0xD000, 0xC000):
        s = (first >> 10) & 1
        i1, i2 = 1 - (((second >> 13) & 1) ^ s), 1 - (((second >> 11) & 1) ^ s)
        offset = _sign((s << 24) | (i1 << 23) | (i2 << 22) | ((first & 0x3FF) << 12) | ((second & 0x7FF) << 1), 25)
        if second & 0x1000:                     # bl: Thumb to Thumb; pc reads as the call + 4 = end
            return "bl", end + offset
        return "blx", ((end & ~3) + offset) & ~3    # blx #imm: to Arm code, from Align(pc, 4)
    if second & 0xFF87 == 0x4780:
        return "blx rm", None
    word = int.from_bytes(code, "little")
    if word & 0x0F000000 == 0x0B000000 and word >> 28 != 0xF:
        return "bl", end + 4 + (_sign(word & 0xFFFFFF, 24) << 2)          # pc reads as the call + 8
    if word >> 25 == 0x7D:                  # 1111 101H: blx #imm (always to Thumb)
        return "blx", end + 4 + (_sign(word & 0xFFFFFF, 24) << 2) + ((word >> 23) & 2)
    if word & 0x0FFFFFF0 == 0x012FFF30 and word >> 28 != 0xF:
        return "blx rm", None
    return None


# struct sigcontext: trap_no, error_code, oldmask, r0-r15, cpsr, fault_address. The kernel's (and
# qemu-user's) sigframe is a ucontext (uc_flags, uc_link, uc_stack: uc_mcontext 20 bytes in) at sp
# when the handler returns; the rt_sigframe puts a siginfo (128 bytes) before it. glibc's restorers
# (SA_RESTORER, always set) are Thumb-2 `mov.w r7, #119|#173; svc 0` on armhf, Arm `mov r7, #N;
# svc 0` built for Arm; the kernel's own are `movs r7, #N; svc 0` and `mov r7, #N; swi 0x9000NN`.
_SIGCONTEXT = {n: 12 + 4 * n for n in range(16)}
_SIGCONTEXT[CPSR] = 12 + 4 * 16
UCONTEXT_MCONTEXT = 20      # uc_flags, uc_link, uc_stack before uc_mcontext (the sigcontext)
SIGINFO_SIZE = 128


def _sigreturns():
    found = []
    for number, name, context in ((119, "sigreturn", UCONTEXT_MCONTEXT),
                                  (173, "rt_sigreturn", SIGINFO_SIZE + UCONTEXT_MCONTEXT)):
        forms = (
            (bytes((0x4f, 0xf0, number, 0x07, 0x00, 0xdf)), "mov.w r7, #%d; svc 0" % number),
            (bytes((number, 0x27, 0x00, 0xdf)), "movs r7, #%d; svc 0" % number),
            ((0xe3a07000 | number).to_bytes(4, "little") + (0xef000000).to_bytes(4, "little"),
             "mov r7, #%d; svc 0" % number),
            ((0xe3a07000 | number).to_bytes(4, "little") + (0xef900000 | number).to_bytes(4, "little"),
             "mov r7, #%d; swi 0x%x" % (number, 0x900000 | number)),
        )
        found += [SigReturn(code, "%s (%s)" % (text, name), context, _SIGCONTEXT) for code, text in forms]
    return tuple(found)


SIGRETURNS = _sigreturns()

ARCH = ArmArch(
    name="arm", address_size=4, byteorder="little",
    registers=_NAMES,
    sp=13, fp=11, ra=14, pc=15,
    callee_saved=tuple(range(4, 12)),
    elf_machine=ELF_MACHINE_ARM,
    aliases={"r13": 13, "r14": 14, "r15": 15, "fp": 11, "ip": 12},
    sigreturns=SIGRETURNS,
)



# -- instruction facts for rows that hold only at call sites (EHABI) -----------------
#
# The straight-line code around a pc, run symbolically over capstone (Arm and
# Thumb-2): each core register is a (register, offset) pair of values at the
# start of the run, or None once something not tracked writes it (a load, an
# arithmetic result). Tracked: push/pop/vpush/vpop and ldm/stmdb with sp
# written back, `add|sub rd, rn, #imm`, `mov rd, rn`, `str|ldr r, [sp, #-n]!|[sp], #n`.

SWEEP_BYTES = 512       # a prologue is shorter: a longer straight line is the body
EPILOGUE_INSNS = 16
_CS = {}
_CORE = {"r%d" % n: n for n in range(13)}
_CORE.update({"sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15})   # capstone's names
_PUSHES = ("push", "vpush", "stmdb", "stmfd")
_POPS = ("pop", "vpop", "ldm", "ldmia", "ldmfd")
_FLAG_SETTING = {"adds": "add", "subs": "sub", "movs": "mov"}     # the same effect on the registers


@dataclass(frozen=True)
class CodeFacts:
    """prologue: the symbolic registers at pc, run from the function's start along the
    straight line (None when it was left: an unconditional branch, a call, a return, or
    pc too far), and stored: the registers it saved on the stack on the way; epilogue: those just after the next return from pc, run from pc (None when
    a branch or a call comes first); returns_by_lr: that return is `bx lr`."""
    prologue: Optional[dict]
    epilogue: Optional[dict]
    returns_by_lr: bool
    stored: frozenset = frozenset()


def value(regs: dict, number: int):
    """A register's symbolic value: (register at the run's start, offset), or None."""
    return regs[number] if number in regs else (number, 0)


def _disassembler(thumb):
    md = _CS.get(thumb)
    if md is None:
        import capstone
        md = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB if thumb else capstone.CS_MODE_ARM)
        md.detail = True
        _CS[thumb] = md
    return md


def _plus(symbol, k):
    return None if symbol is None else (symbol[0], symbol[1] + k)


def _run(insn, regs, stored=None):
    """Apply one instruction to the symbolic registers; add to `stored` the registers it saves on
    the stack."""
    from capstone import arm as cs_arm
    mnemonic = insn.mnemonic.split(".")[0]
    mnemonic = _FLAG_SETTING.get(mnemonic, mnemonic)
    ops = insn.operands
    names = [_CORE.get(insn.reg_name(o.reg)) if o.type == cs_arm.ARM_OP_REG else None for o in ops]
    _, written = insn.regs_access()
    written = {_CORE.get(insn.reg_name(r)) for r in written} - {None}
    if SP in written and (mnemonic in _PUSHES or mnemonic in _POPS):
        listed = [n for n, o in zip(names, ops) if o.type == cs_arm.ARM_OP_REG and n != SP]
        width = 8 if mnemonic.startswith("v") and insn.reg_name(ops[0].reg).startswith("d") else 4
        size = width * (len(ops) - (1 if names[0] == SP else 0))
        regs[SP] = _plus(value(regs, SP), -size if mnemonic in _PUSHES else size)
        for n in listed:
            if mnemonic in _POPS and n is not None:
                regs[n] = None
            elif stored is not None and n is not None:
                stored.add(n)
        return
    if mnemonic in ("add", "sub", "addw", "subw") and len(ops) == 3 and ops[2].type == cs_arm.ARM_OP_IMM \
            and names[0] is not None and names[1] is not None:
        regs[names[0]] = _plus(value(regs, names[1]), ops[2].imm if mnemonic.startswith("add") else -ops[2].imm)
        return
    if mnemonic in ("add", "sub") and len(ops) == 2 and ops[1].type == cs_arm.ARM_OP_IMM and names[0] is not None:
        regs[names[0]] = _plus(value(regs, names[0]), ops[1].imm if mnemonic == "add" else -ops[1].imm)
        return
    if mnemonic == "mov" and len(ops) == 2 and names[0] is not None and names[1] is not None:
        regs[names[0]] = value(regs, names[1])
        return
    if stored is not None and mnemonic in ("str", "strd") and ops[-1].type == cs_arm.ARM_OP_MEM \
            and _CORE.get(insn.reg_name(ops[-1].mem.base)) == SP:
        stored.update(n for n in names if n is not None)
    if mnemonic in ("str", "ldr") and insn.writeback and len(ops) >= 2 and ops[1].type == cs_arm.ARM_OP_MEM \
            and _CORE.get(insn.reg_name(ops[1].mem.base)) == SP:
        step = ops[1].mem.disp if mnemonic == "str" else 4     # [sp, #-4]! down, [sp], #4 up
        regs[SP] = _plus(value(regs, SP), step)
        if mnemonic == "ldr" and names[0] is not None:
            regs[names[0]] = None
        return
    for n in written:
        if n != PC:
            regs[n] = None


def _branches(insn):
    _, written = insn.regs_access()
    return any(_CORE.get(insn.reg_name(r)) == PC for r in written) or \
        insn.mnemonic.split(".")[0] in ("bl", "blx", "cbz", "cbnz")


def _conditional(insn):
    from capstone import arm as cs_arm
    return insn.cc not in (cs_arm.ARM_CC_AL, cs_arm.ARM_CC_INVALID) or insn.mnemonic in ("cbz", "cbnz")


def _returns(insn):
    mnemonic = insn.mnemonic.split(".")[0]
    if mnemonic == "bx":
        return insn.op_str == "lr"
    return mnemonic in _POPS + ("ldr",) and "pc" in insn.op_str and (mnemonic != "ldr" or "[sp]" in insn.op_str)


def code_facts(read, start: int, pc: int, thumb: bool) -> Optional[CodeFacts]:
    """CodeFacts at pc in the function starting at start; None when the code cannot be read."""
    md = _disassembler(thumb)
    prologue, stored = None, set()
    if pc - start <= SWEEP_BYTES:
        code = read(start, pc - start)
        if code is None:
            return None
        prologue, at = {}, start
        for insn in md.disasm(code, start):
            at = insn.address + insn.size
            if _branches(insn) and not _conditional(insn):
                prologue = None
                break
            _run(insn, prologue, stored)
        if at != pc:
            prologue = None         # bytes capstone cannot decode, or pc inside an instruction
    epilogue, by_lr = None, False
    code = read(pc, 4 * EPILOGUE_INSNS)
    if code is not None:
        regs = {}
        for count, insn in enumerate(md.disasm(code, pc)):
            if count >= EPILOGUE_INSNS:
                break
            if _branches(insn):
                if _returns(insn) and not _conditional(insn):
                    _run(insn, regs)
                    epilogue, by_lr = regs, insn.mnemonic.startswith("bx")
                break
            _run(insn, regs)
    return CodeFacts(prologue, epilogue, by_lr, frozenset(stored))
