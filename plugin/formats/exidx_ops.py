"""ARM EHABI unwind instructions (ARM IHI 0038, section 10.3), decoded.

Each instruction acts on a virtual stack pointer (vsp), starting at the
frame's sp, and on virtual registers popped from where vsp points:

    00xxxxxx            vsp += (x << 2) + 4
    01xxxxxx            vsp -= (x << 2) + 4
    10000000 00000000   refuse to unwind
    1000iiii iiiiiiii   pop r4-r15 under the 12-bit mask (bit 0 = r4)
    1001nnnn            vsp = r[n]   (n = 13 and 15 reserved)
    10100nnn            pop r4-r[4+n]
    10101nnn            pop r4-r[4+n], r14
    10110000            finish
    10110001 0000iiii   pop r0-r3 under the mask (0 and xxxx != 0: spare)
    10110010 uleb128    vsp += 0x204 + (uleb128 << 2)
    10110011 sssscccc   pop D[s]-D[s+c] saved by FSTMFDX (8 bytes each + 4)
    101101nn            spare
    10111nnn            pop D[8]-D[8+n] saved by FSTMFDX
    11000nnn (n < 6)    pop wR[10]-wR[10+n]
    11000110 sssscccc   pop wR[s]-wR[s+c]
    11000111 0000iiii   pop wCGR0-3 under the mask (0 and xxxx != 0: spare)
    11001000 sssscccc   pop D[16+s]-D[16+s+c] saved by VPUSH
    11001001 sssscccc   pop D[s]-D[s+c] saved by VPUSH
    11001yyy (y > 1)    spare
    11010nnn            pop D[8]-D[8+n] saved by VPUSH
    11xxxyyy (x > 2)    spare

Registers are popped lowest-numbered first from the lowest address. Spare
and reserved encodings, and an instruction cut short by the end of its
bytes, are DecodeErrors naming the section, the offset of the word the
opcodes start in and the byte's position.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.leb128 import LebError, LebProblem, read_uleb

SP, LR, PC = 13, 14, 15


class OpKind(str, Enum):
    VSP_ADD = "vsp-add"
    VSP_SUB = "vsp-sub"
    POP = "pop"                         # core registers r0-r15
    VSP_FROM_REGISTER = "vsp-from-register"
    FINISH = "finish"
    REFUSE = "refuse"                   # refuse to unwind
    POP_VFP = "pop-vfp"                 # D registers (FSTMFDX or VPUSH layout)
    POP_WMMX = "pop-wmmx"               # iWMMXt data registers wR0-wR15
    POP_WMMX_CONTROL = "pop-wmmx-control"   # iWMMXt control registers wCGR0-wCGR3


@dataclass(frozen=True)
class Instruction:
    position: int                   # index of its first byte among the opcode bytes
    raw: bytes
    kind: OpKind
    amount: int = 0                 # bytes vsp moves (adds, subs and pops)
    registers: Tuple[int, ...] = ()  # popped: r numbers, D numbers, wR numbers or wCGR numbers
    register: Optional[int] = None  # vsp = r[register]
    fstmx: bool = False             # VFP pop in the FSTMFDX layout (one pad word)

    def text(self):
        kind = self.kind
        if kind == OpKind.VSP_ADD:
            return "vsp = vsp + %d" % self.amount
        if kind == OpKind.VSP_SUB:
            return "vsp = vsp - %d" % self.amount
        if kind == OpKind.VSP_FROM_REGISTER:
            return "vsp = r%d" % self.register
        if kind == OpKind.FINISH:
            return "finish"
        if kind == OpKind.REFUSE:
            return "refuse to unwind"
        prefix = {OpKind.POP: "r", OpKind.POP_VFP: "d", OpKind.POP_WMMX: "wR",
                  OpKind.POP_WMMX_CONTROL: "wCGR"}[kind]
        regs = ", ".join("%s%d" % (prefix, n) for n in self.registers)
        return "pop {%s}%s" % (regs, " (FSTMFDX)" if self.fstmx else "")


def decode_opcodes(data: bytes, section: str, offset: int) -> Tuple[Instruction, ...]:
    """Every instruction in `data` (trailing ones after `finish` too, as dumps show them)."""
    out = []
    pos = 0
    n = len(data)

    def error(at, cause, kind=DecodeKind.MALFORMED):
        return DecodeError(section, offset, "opcode byte %d (0x%02x): %s" % (at, data[at], cause), kind)

    def operand(at):
        if at + 1 >= n:
            raise error(at, "instruction is cut short by the end of the opcodes", DecodeKind.TRUNCATED)
        return data[at + 1]

    while pos < n:
        op = data[pos]
        start = pos
        if op < 0x40:
            ins = Instruction(start, data[start:start + 1], OpKind.VSP_ADD, ((op & 0x3F) << 2) + 4)
        elif op < 0x80:
            ins = Instruction(start, data[start:start + 1], OpKind.VSP_SUB, ((op & 0x3F) << 2) + 4)
        elif op < 0x90:
            mask = ((op & 0x0F) << 8) | operand(pos)
            pos += 1
            if mask == 0:
                ins = Instruction(start, data[start:pos + 1], OpKind.REFUSE)
            else:
                regs = tuple(4 + i for i in range(12) if mask >> i & 1)
                ins = Instruction(start, data[start:pos + 1], OpKind.POP, 4 * len(regs), regs)
        elif op < 0xA0:
            reg = op & 0x0F
            if reg in (SP, PC):
                raise error(start, "reserved (register-to-register move prefix)")
            ins = Instruction(start, data[start:start + 1], OpKind.VSP_FROM_REGISTER, register=reg)
        elif op < 0xB0:
            regs = tuple(range(4, 5 + (op & 0x07))) + ((LR,) if op & 0x08 else ())
            ins = Instruction(start, data[start:start + 1], OpKind.POP, 4 * len(regs), regs)
        elif op == 0xB0:
            ins = Instruction(start, data[start:start + 1], OpKind.FINISH)
        elif op == 0xB1:
            mask = operand(pos)
            pos += 1
            if mask == 0 or mask & 0xF0:
                raise error(start, "spare (pop r0-r3 with mask 0x%02x)" % mask)
            regs = tuple(i for i in range(4) if mask >> i & 1)
            ins = Instruction(start, data[start:pos + 1], OpKind.POP, 4 * len(regs), regs)
        elif op == 0xB2:
            value, pos = _uleb(data, pos + 1, error, start)
            pos -= 1
            ins = Instruction(start, data[start:pos + 1], OpKind.VSP_ADD, 0x204 + (value << 2))
        elif op == 0xB3:
            ins = _vfp(start, data, operand(pos), 0, True)
            pos += 1
        elif op < 0xB8:
            raise error(start, "spare")
        elif op < 0xC0:
            ins = _vfp(start, data, op & 0x07, 8, True, count_only=True)
        elif op < 0xC6:
            regs = tuple(range(10, 11 + (op & 0x07)))
            ins = Instruction(start, data[start:start + 1], OpKind.POP_WMMX, 8 * len(regs), regs)
        elif op == 0xC6:
            arg = operand(pos)
            pos += 1
            first, count = arg >> 4, (arg & 0x0F) + 1
            if first + count > 16:
                raise error(start, "pop of wR%d-wR%d runs past wR15" % (first, first + count - 1))
            regs = tuple(range(first, first + count))
            ins = Instruction(start, data[start:pos + 1], OpKind.POP_WMMX, 8 * count, regs)
        elif op == 0xC7:
            mask = operand(pos)
            pos += 1
            if mask == 0 or mask & 0xF0:
                raise error(start, "spare (pop wCGR with mask 0x%02x)" % mask)
            regs = tuple(i for i in range(4) if mask >> i & 1)
            ins = Instruction(start, data[start:pos + 1], OpKind.POP_WMMX_CONTROL, 4 * len(regs), regs)
        elif op in (0xC8, 0xC9):
            ins = _vfp(start, data, operand(pos), 16 if op == 0xC8 else 0, False)
            pos += 1
        elif op < 0xD0:
            raise error(start, "spare")
        elif op < 0xD8:
            ins = _vfp(start, data, op & 0x07, 8, False, count_only=True)
        else:
            raise error(start, "spare")
        if ins.kind == OpKind.POP_VFP and ins.registers[-1] > 31:
            raise error(start, "pop of d%d-d%d runs past d31" % (ins.registers[0], ins.registers[-1]))
        out.append(ins)
        pos += 1
    return tuple(out)


def _vfp(start, data, arg, base, fstmx, count_only=False):
    """A VFP pop: `arg` is sssscccc (or, count_only, the nnn of D[8]-D[8+nnn])."""
    if count_only:
        first, count, end = base, arg + 1, start + 1
    else:
        first, count, end = base + (arg >> 4), (arg & 0x0F) + 1, start + 2
    regs = tuple(range(first, first + count))
    amount = 8 * count + (4 if fstmx else 0)
    return Instruction(start, data[start:end], OpKind.POP_VFP, amount, regs, fstmx=fstmx)


def _uleb(data, pos, error, start):
    try:
        return read_uleb(data, pos, max_bits=63)
    except LebError as exc:
        if exc.kind == LebProblem.TRUNCATED:
            raise error(start, "ULEB128 operand is cut short by the end of the opcodes", DecodeKind.TRUNCATED) from None
        raise error(start, "ULEB128 operand is too long", DecodeKind.LIMIT) from None
