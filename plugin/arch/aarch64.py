"""AArch64 (DWARF for the Arm 64-bit architecture: x0-x30 = 0-30, sp = 31).

Instruction facts: calls (`bl`, `blr`, `blraa`/`blrab`), returns (`ret`,
`retaa`, `retab`), the frame-record prologue (`stp x29, x30, [sp, #-N]!;
mov x29, sp`), and the pointer-auth and BTI instructions that may open a
function (`paciasp`/`pacibsp`, `bti c`/`bti jc`). At a function's first
instruction and at a return, the return address is in x30 and sp is the
CFA; x30 may carry a pointer-auth signature there.

Go (gc) on arm64 keeps its frame record just below sp, after a stack-bound
check that leaves sp alone (ldr x16, [x28, #16]; [sub x17, sp, #K;] cmp; b.ls):

    str x30, [sp, #-N]!; stur x29, [sp, #-8]; sub x29, sp, #8
    (large frames: sub x20, sp, #N; stp x29, x30, [x20, #-8]; mov sp, x20; sub x29, sp, #8)

so [x29] = caller's x29, [x29+8] = [sp] = return address, and the caller's
sp (the CFA) is x29 + 8 + N: a ChainLayout with the N of the prologue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from plugin.arch.base import Arch, ChainLayout, Edge, FrameEdge, Read, SigReturn, Slots
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

_NAMES = {n: "x%d" % n for n in range(31)}
_NAMES[29] = "x29"
_NAMES[30] = "x30"
_NAMES[31] = "sp"
_NAMES[32] = "pc"
_NAMES[34] = "ra_sign_state"   # pseudo register toggled by DW_CFA_AARCH64_negate_ra_state
for _n in range(32):
    _NAMES[64 + _n] = "v%d" % _n

# Virtual addresses use at most 48 bits here (52 with LVA, not used by Linux
# user space by default); the bits above carry the pointer-auth code.
_VA_BITS = 48

MOV_X29_SP = 0x910003FD          # add x29, sp, #0
ADD_X29_SP_MASK = 0xFFC003FF     # add x29, sp, #imm (any imm12)
STP_PRE_MASK = 0xFFC07FFF        # stp x29, x30, [sp, #imm7*8]!  (imm7 masked out)
STP_PRE = 0xA9807BFD
STR_LR_PRE_MASK = 0xFFE00FFF     # str x30, [sp, #imm9]!  (imm9 masked out): a frameless function's entry
STR_LR_PRE = 0xF8000FFE
SVC_0 = 0xD4000001               # svc #0
# What glibc's clone/clone3 do between `svc #0` and the branch to the child,
# as (mask, value): `cmp x0, #0`, `b.cond`, `cbz/cbnz x0`; none changes x0.
AFTER_SVC = ((0xFFFFFFFF, 0xF100001F), (0xFF000010, 0x54000000), (0xFE00001F, 0xB4000000))
RETURNS = tuple((word.to_bytes(4, "little"), name) for word, name in (
    (0xD65F03C0, "ret"), (0xD65F0BFF, "retaa"), (0xD65F0FFF, "retab")))
PAC_SP = (0xD503233F, 0xD503237F)                    # paciasp, pacibsp: only ever at an entry
PAC_OR_BTI = PAC_SP + (0xD503245F, 0xD50324DF)        # ... and bti c, bti jc (landing pads)
LANDING_PADS = tuple(word.to_bytes(4, "little") for word in PAC_OR_BTI)

# Go's prologue words (see the module's docstring)
GO_STACK_CHECK = (0xF9400B90, 0xEB3063FF, 0xEB10023F)      # ldr x16, [x28, #16]; cmp sp, x16; cmp x17, x16
GO_SUB_X17_MASK, GO_SUB_X17 = 0xFF8003FF, 0xD10003F1       # sub x17, sp, #K{, lsl #12}
GO_BLS_MASK, GO_BLS = 0xFF00001F, 0x54000009               # b.ls
GO_STR_LR_MASK, GO_STR_LR = 0xFFE00FFF, 0xF8000FFE         # str x30, [sp, #imm9]!
GO_STUR_FP = 0xF81F83FD                                    # stur x29, [sp, #-8]
GO_SUB_FP = 0xD10023FD                                     # sub x29, sp, #8
GO_SUB_X20_MASK, GO_SUB_X20 = 0xFF8003FF, 0xD10003F4       # sub x20, sp, #N{, lsl #12}
GO_STP_X20, GO_MOV_SP_X20 = 0xA93FFA9D, 0x9100029F          # stp x29, x30, [x20, #-8]; mov sp, x20
# Where b.ls goes: spill arguments to [sp, #K] (str/stp of x or d registers, sp unchanged), `mov x3, x30`,
# bl runtime.morestack*, reload them, `b start`; gogo resumes after the bl with x30 restored.
GO_SPILL_MASK, GO_SPILLS = 0xFFC003E0, (0xF90003E0, 0xFD0003E0, 0xA90003E0, 0x6D0003E0,
                                        0xF94003E0, 0xFD4003E0, 0xA94003E0, 0x6D4003E0)
GO_MOV_X3_LR, BL_MASK, BL, B = 0xAA1E03E3, 0xFC000000, 0x94000000, 0x14000000
GO_GROWTH_WORDS = 64


def _signed(value, bits):
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def _sub_immediate(word):
    return ((word >> 10) & 0xFFF) << (12 if word >> 22 & 1 else 0)


def go_frame(words):
    """(index of the first frame instruction, frame size N, index of `sub x29, sp, #8`) of Go's
    prologue in `words` (after its stack check), or None."""
    at = 0
    while at < len(words) and (words[at] in GO_STACK_CHECK or words[at] & GO_SUB_X17_MASK == GO_SUB_X17
                               or words[at] & GO_BLS_MASK == GO_BLS):
        at += 1
    rest = words[at:at + 4]
    if len(rest) >= 3 and rest[0] & GO_STR_LR_MASK == GO_STR_LR and rest[1:3] == [GO_STUR_FP, GO_SUB_FP]:
        imm9 = (rest[0] >> 12) & 0x1FF
        size = 0x200 - imm9 if imm9 & 0x100 else 0
        return (at, size, at + 2) if size else None
    if len(rest) == 4 and rest[0] & GO_SUB_X20_MASK == GO_SUB_X20 and rest[1:] == [GO_STP_X20, GO_MOV_SP_X20, GO_SUB_FP]:
        return at, _sub_immediate(rest[0]), at + 3
    return None


@dataclass(frozen=True)
class AArch64(Arch):
    def strip_pointer_auth(self, value):
        if value >> 55 & 1:          # kernel-half address: fill with ones
            return value | ~((1 << _VA_BITS) - 1) & self.mask
        return value & ((1 << _VA_BITS) - 1)

    def call_before(self, read: Read, address: int) -> Optional[str]:
        code = read(address - 4, 4)
        if code is None:
            return None
        word = int.from_bytes(code, "little")
        if word & 0xFC000000 == 0x94000000:
            return "bl"
        if word & 0xFFFFFC1F == 0xD63F0000:
            return "blr"
        if word & 0xFFFFF800 == 0xD63F0800:       # blraa/blrab (pointer-auth forms)
            return "blra"
        return None

    def entry_row(self, pc: int, unchanged=(), ra_signed=False) -> Row:
        registers = {n: Rule(RuleKind.SAME) for n in unchanged}
        registers[self.ra] = Rule(RuleKind.SAME)
        return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=self.sp, offset=0),
                   registers=registers, ra_signed=ra_signed)

    def frame_edge(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        code = read(pc, 4)
        if code is None:
            return None
        insn = self._word(code)
        if self._at_entry(read, pc, start, LANDING_PADS):
            return Edge(FrameEdge.ENTRY, 0,
                        "pc is at the function's entry (start 0x%x, from symbols): the return address is in x30"
                        % start)
        stores_record = insn & STP_PRE_MASK == STP_PRE
        if start is None and (stores_record or insn in PAC_SP):
            return Edge(FrameEdge.ENTRY, 0,
                        "the code at pc is a function entry (`%s`, no symbol here): the return address is in x30"
                        % ("stp x29, x30, [sp, #-N]!" if stores_record else "paciasp"))
        if self.return_in(code):
            return Edge(FrameEdge.AT_RETURN, 0, "the code at pc is `ret`: the return address is in x30")
        go = self._go_edge(read, pc, start) or self.stack_growth_edge(read, pc, start)
        if go is not None:
            return go
        previous = read(pc - 4, 4)
        if insn == MOV_X29_SP and previous is not None:
            stp = self._word(previous)
            if stp & STP_PRE_MASK == STP_PRE:
                imm7 = (stp >> 15) & 0x7F
                size = (128 - imm7) * 8 if imm7 & 0x40 else 0     # the pre-index moved sp down by `size`
                if size:
                    return Edge(FrameEdge.AFTER_PUSH, size,
                                "the code at pc is `mov x29, sp` right after `stp x29, x30, [sp, #-%d]!`: "
                                "the frame record is at [sp]" % size)
        return None

    def entries_in(self, code: bytes, base: int) -> list:
        """`stp x29, x30, [sp, #-N]!` (or, without a frame pointer, `str x30, [sp, #-N]!`), with the
        pointer-auth or BTI instruction before it when there is one."""
        found = []
        for offset in range(0, len(code) - 3, 4):
            word = self._word(code, offset)
            if word & STP_PRE_MASK == STP_PRE or word & STR_LR_PRE_MASK == STR_LR_PRE:
                pad = offset >= 4 and self._word(code, offset - 4) in PAC_OR_BTI
                found.append(base + offset - (4 if pad else 0))
        return sorted(found, reverse=True)

    def syscall_before(self, read: Read, pc: int) -> Optional[int]:
        code = read(pc - 16, 16)
        if code is None:
            return None
        words = [self._word(code, i) for i in range(0, 16, 4)]
        for at in range(3, -1, -1):
            if words[at] == SVC_0 and all(any(w & mask == value for mask, value in AFTER_SVC)
                                          for w in words[at + 1:]):
                return pc - 16 + 4 * at
        return None

    def sets_up_frame_pointer(self, code: bytes) -> bool:
        words = self._words(code)
        return any(w & ADD_X29_SP_MASK == MOV_X29_SP for w in words) or self.chain_layout(code) is not None

    def chain_layout(self, code: bytes) -> Optional[ChainLayout]:
        found = go_frame(self._words(code))
        if found is None or len(code) < 4 * (found[2] + 1):
            return None
        size = found[1]
        return ChainLayout(size + 8, 8, "Go's arm64 prologue keeps the frame record 8 bytes below sp: "
                           "the CFA is x29+%d (frame size %d + 8)" % (size + 8, size))

    def _go_edge(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        """The frame at an exact pc inside Go's prologue, before its record is complete."""
        if start is None or not start < pc <= start + 64:
            return None
        code = read(start, pc - start + 16)
        found = go_frame(self._words(code)) if code else None
        if found is None:
            return None
        first, size, last = found
        index = (pc - start) // 4
        large = last - first == 3       # sp moves at `mov sp, x20`, just before `sub x29`
        if index <= first or large and index < last:       # only the stack-bound check ran
            return Edge(FrameEdge.ENTRY, 0, "pc is at Go's frame set-up after its stack-bound check (start 0x%x), "
                        "sp not moved yet: the return address is in x30" % start)
        if first < index < last:
            return Edge(FrameEdge.AFTER_PUSH, 0, "pc is inside Go's prologue after `str x30, [sp, #-%d]!`: the "
                        "return address is at [sp], x29 is not saved yet" % size, Slots(cfa=size, ra=-size, fp=None))
        if index == last:
            return Edge(FrameEdge.AFTER_PUSH, size + 8, "pc is at Go's `sub x29, sp, #8`: the saved x29 is at "
                        "[sp-8] and the return address at [sp]", Slots(cfa=size, ra=-size, fp=-size - 8))
        return None

    def stack_growth_edge(self, read: Read, pc: int, start: Optional[int], exact: bool = True) -> Optional[Edge]:
        if start is None or not start < pc <= start + (1 << 20):
            return None
        head = read(start, 16)
        words = self._words(head) if head else []
        at = next((i for i, w in enumerate(words) if w & GO_BLS_MASK == GO_BLS), None)
        if at is None or not all(
                w in GO_STACK_CHECK or w & GO_SUB_X17_MASK == GO_SUB_X17 for w in words[:at]):
            return None
        target = start + 4 * at + 4 * _signed((words[at] >> 5) & 0x7FFFF, 19)
        if not target <= pc < target + 4 * GO_GROWTH_WORDS:
            return None
        tail = read(target, 4 * GO_GROWTH_WORDS) or read(target, pc - target + 16)
        words = self._words(tail or b"")
        for index, word in enumerate(words):
            if word & BL_MASK == B:
                back = target + 4 * index + 4 * _signed(word & 0x3FFFFFF, 26)
                if back != start or pc > target + 4 * index:
                    return None
                if not exact:       # a return address after the bl: x30 was copied to x3 before it
                    if not (target < pc and words[(pc - 4 - target) // 4] & BL_MASK == BL):
                        return None
                    return Edge(FrameEdge.ENTRY, 0, "pc is the return address of Go's call of runtime.morestack "
                                "at 0x%x (reached from the stack-bound check at the start 0x%x before the frame "
                                "is set up): the return address was copied to x3 before the call" % (
                                    pc - 4, start), ra_in=3)
                return Edge(FrameEdge.ENTRY, 0, "pc is in Go's stack-growth call at 0x%x, where the stack-bound "
                            "check at the start 0x%x branches before the frame is set up and which branches back "
                            "to the start: the return address is in x30" % (target, start))
            if not (word & GO_SPILL_MASK in GO_SPILLS or word == GO_MOV_X3_LR or word & BL_MASK == BL):
                return None
        return None

    def _words(self, code):
        return [self._word(code, i) for i in range(0, len(code) - 3, 4)]

    def _word(self, data, offset=0):
        return int.from_bytes(data[offset:offset + 4], self.byteorder)


# rt_sigreturn: `mov x8, #139; svc #0` (the vdso's __kernel_rt_sigreturn,
# qemu-user's trampoline page). sp is the rt_sigframe: siginfo (128 bytes),
# then the ucontext, whose uc_mcontext (struct sigcontext: fault_address,
# x0..x30, sp, pc, pstate) is 176 bytes in.
_SIGCONTEXT = {n: 8 + 8 * n for n in range(31)}
_SIGCONTEXT.update({31: 8 + 8 * 31, 32: 8 + 8 * 32})
SIGRETURNS = (SigReturn((0xD2801168).to_bytes(4, "little") + (0xD4000001).to_bytes(4, "little"),
                        "mov x8, #139; svc #0 (rt_sigreturn)", 128 + 176, _SIGCONTEXT),)

ARCH = AArch64(
    name="aarch64", address_size=8, byteorder="little",
    registers=_NAMES,
    sp=31, fp=29, ra=30, pc=32,
    callee_saved=tuple(range(19, 31)) + tuple(range(72, 80)),
    elf_machine=183,
    aliases={"fp": 29, "lr": 30},
    stack_alignment=16, pointer_auth=True, keeps_frame_records=True, min_instruction_size=4,
    returns=RETURNS, sigreturns=SIGRETURNS, syscall_result=0,               # x0
)
