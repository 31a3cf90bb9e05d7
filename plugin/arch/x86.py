"""x86 instruction facts, shared by x86_64 and i386.

Calls (`call rel32`, `call r/m`), returns (`ret`, `ret imm16`, `rep ret`),
the frame-record prologue (`push bp; mov bp, sp`) and the CET landing pad
(`endbr64`/`endbr32`) that may precede it. At a function's first
instruction and at a return, the return address is at [sp]: CFA = sp +
one word, return address = [CFA - one word].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from plugin.arch.base import Arch, Edge, FrameEdge, Read
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

ENDBR64 = b"\xf3\x0f\x1e\xfa"
ENDBR32 = b"\xf3\x0f\x1e\xfb"
LANDING_PADS = (ENDBR64, ENDBR32)
PUSH_BP = 0x55
SYSCALL = b"\x0f\x05"
# What glibc's clone/clone3 do between `syscall` and the branch to the child:
# `test rax, rax` and `jl rel8|rel32` (to the error path); none changes rax.
# (opcode bytes, instruction length)
AFTER_SYSCALL = ((b"\x48\x85\xc0", 3), (b"\x7c", 2), (b"\x0f\x8c", 6))
RETURNS = ((b"\xc3", "ret"), (b"\xc2", "ret imm16"), (b"\xf3\xc3", "rep ret"))


@dataclass(frozen=True)
class X86(Arch):
    mov_bp_sp: tuple = ()       # encodings of `mov bp, sp` (both opcode directions)

    def call_before(self, read: Read, address: int) -> Optional[str]:
        code = read(address - 7, 7)
        if code is None:
            return None
        if code[2] == 0xE8:                       # call rel32: e8 + 4 bytes
            return "call rel32"
        # call r/m (ff /2): modrm reg field == 2; total length 2..7 bytes
        for length in range(2, 8):
            start = 7 - length
            if code[start] != 0xFF:
                continue
            modrm = code[start + 1]
            if (modrm >> 3) & 7 != 2:
                continue
            if _modrm_length(code[start + 1:]) == length - 1:
                return "call r/m"
        # REX-prefixed indirect call: 41 ff d0..d7 (call r8-r15)
        if code[4] == 0x41 and code[5] == 0xFF and (code[6] >> 3) & 7 == 2 and code[6] >> 6 == 3:
            return "call r/m"
        return None

    def direct_call_target(self, read: Read, address: int) -> Optional[int]:
        code = read(address - 5, 5)
        if code is None or code[0] != 0xE8:       # call rel32: e8 + signed 4-byte displacement
            return None
        return (address + int.from_bytes(code[1:], "little", signed=True)) % (1 << (8 * self.address_size))

    def returns_to_caller_at_once(self, read: Read, address: int) -> bool:
        # i386 PIC's pc thunk (__x86.get_pc_thunk.REG): `mov r32, [esp]; ret`
        # (8b, ModRM mod=00 rm=100, SIB 24 = [esp], c3). Its return address
        # is popped by its `ret` before any other code runs.
        code = read(address, 4)
        return code is not None and code[0] == 0x8B and code[1] & 0xC7 == 0x04 and code[2:] == b"\x24\xc3"

    def entry_row(self, pc: int, unchanged=(), ra_signed=False) -> Row:
        word = self.address_size
        registers = {n: Rule(RuleKind.SAME) for n in unchanged}
        registers[self.ra] = Rule(RuleKind.OFFSET, offset=-word)
        return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=self.sp, offset=word),
                   registers=registers, ra_signed=ra_signed)

    def frame_edge(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        code = read(pc, 4)
        if code is None:
            return None
        bp, sp = self.name_of(self.fp), self.name_of(self.sp)
        if self._at_entry(read, pc, start, LANDING_PADS):
            return Edge(FrameEdge.ENTRY, 0,
                        "pc is at the function's entry (start 0x%x, from symbols): the return address is at [%s]"
                        % (start, sp))
        after_push = read(pc + 1, 3) or b""
        if start is None and code[0] == PUSH_BP and after_push.startswith(self.mov_bp_sp):
            return Edge(FrameEdge.ENTRY, 0,
                        "the code at pc is `push %s; mov %s, %s`, a function entry (no symbol here): "
                        "the return address is at [%s]" % (bp, bp, sp, sp))
        if code.startswith(self.mov_bp_sp) and read(pc - 1, 1) == bytes([PUSH_BP]):
            return Edge(FrameEdge.AFTER_PUSH, 2 * self.address_size,
                        "the code at pc is `mov %s, %s` right after `push %s`: the saved %s is at [%s] and "
                        "the return address above it" % (bp, sp, bp, bp, sp))
        if self.return_in(code):
            return Edge(FrameEdge.AT_RETURN, 0,
                        "the code at pc is `ret`: the frame is already taken down and the return address "
                        "is at [%s]" % sp)
        return None

    def syscall_before(self, read: Read, pc: int) -> Optional[int]:
        code = read(pc - 16, 16)
        if code is None:
            return None
        for start in range(len(code) - 2, -1, -1):      # the last `syscall`, then only result tests
            if code[start:start + 2] == SYSCALL and _only_result_tests(code[start + 2:]):
                return pc - 16 + start
        return None

    def sets_up_frame_pointer(self, code: bytes) -> bool:
        return any(pattern in code for pattern in self.mov_bp_sp)

    def entries_in(self, code: bytes, base: int) -> list:
        """`push bp; mov bp, sp`, with the landing pad before it when there is one."""
        found = []
        for pattern in self.mov_bp_sp:
            head = bytes([PUSH_BP]) + pattern
            at = code.find(head)
            while at >= 0:
                pad = at >= 4 and code[at - 4:at] in LANDING_PADS
                found.append(base + at - (4 if pad else 0))
                at = code.find(head, at + 1)
        return sorted(found, reverse=True)

    def may_save_frame_pointer(self, prologue: Callable[[], Optional[bytes]]) -> bool:
        # A callee-saved register is saved with `push` in the prologue: with no
        # `push bp` byte the register still holds the caller's value.
        code = prologue()
        return code is None or PUSH_BP in code


def _only_result_tests(code):
    """Is `code` a (possibly empty) run of AFTER_SYSCALL instructions?"""
    while code:
        length = next((n for opcode, n in AFTER_SYSCALL if code.startswith(opcode) and len(code) >= n), None)
        if length is None:
            return False
        code = code[length:]
    return True


def _modrm_length(tail):
    """Bytes taken by a ModRM operand (ModRM, SIB, displacement) in 64-bit mode."""
    modrm = tail[0]
    mod, rm = modrm >> 6, modrm & 7
    if mod == 3:
        return 1
    length = 1
    if rm == 4:                               # SIB follows
        length += 1
        if mod == 0 and len(tail) > 1 and tail[1] & 7 == 5:
            return length + 4
    if mod == 0 and rm == 5:                  # rip-relative disp32
        return length + 4
    return length + {0: 0, 1: 1, 2: 4}[mod]
