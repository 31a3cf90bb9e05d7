"""AArch64 (DWARF for the Arm 64-bit architecture: x0-x30 = 0-30, sp = 31).

Instruction facts: calls (`bl`, `blr`, `blraa`/`blrab`), returns (`ret`,
`retaa`, `retab`), the frame-record prologue (`stp x29, x30, [sp, #-N]!;
mov x29, sp`), and the pointer-auth and BTI instructions that may open a
function (`paciasp`/`pacibsp`, `bti c`/`bti jc`). At a function's first
instruction and at a return, the return address is in x30 and sp is the
CFA; x30 may carry a pointer-auth signature there.
"""

from dataclasses import dataclass
from typing import Optional

from plugin.arch import Arch, Edge, FrameEdge, Read, SigReturn
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
RETURNS = tuple((word.to_bytes(4, "little"), name) for word, name in (
    (0xD65F03C0, "ret"), (0xD65F0BFF, "retaa"), (0xD65F0FFF, "retab")))
PAC_SP = (0xD503233F, 0xD503237F)                    # paciasp, pacibsp: only ever at an entry
PAC_OR_BTI = PAC_SP + (0xD503245F, 0xD50324DF)        # ... and bti c, bti jc (landing pads)
LANDING_PADS = tuple(word.to_bytes(4, "little") for word in PAC_OR_BTI)


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

    def sets_up_frame_pointer(self, code: bytes) -> bool:
        words = (self._word(code, i) for i in range(0, len(code) - 3, 4))
        return any(w & ADD_X29_SP_MASK == MOV_X29_SP for w in words)

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
    returns=RETURNS, sigreturns=SIGRETURNS,
)
