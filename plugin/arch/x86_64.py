"""x86_64 (System V psABI DWARF register numbering), and Go's frame-pointer prologue.

Go (gc) keeps frame pointers on amd64 with a prologue of its own, after an
optional stack-bound check that leaves rsp alone:

    cmp 0x10(%r14), %rsp; jbe M           (or lea -K(%rsp), %r12; cmp 0x10(%r14), %r12; jbe M;
                                           0x18: stackguard1, in functions that run on the system stack)
    sub $X, %rsp
    mov %rbp, X-8(%rsp)
    lea X-8(%rsp), %rbp
    ...
    mov X-8(%rsp), %rbp; add $X, %rsp; ret

so rbp points at the usual frame record ([rbp] = caller's rbp, [rbp+8] =
return address, CFA = rbp+16) and the chain is followed as for C. At the
exact pc of the prologue's and epilogue's instructions the record is not
(yet, any more) in place; frame_edge says where things are there.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional

from plugin.arch.base import Edge, FrameEdge, PrologueModel, Read, SigReturn, Slots
from plugin.arch.x86 import ENDBR64, PUSH_BP, RETURNS, X86
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

_NAMES = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"]
# psABI DWARF numbers 17-32: xmm0-xmm15 (named in rows; not integer registers a frame restores)
_VECTOR_NAMES = {17 + n: "xmm%d" % n for n in range(16)}

# Go's stack-bound check (rsp unchanged): cmp 0x10/0x18(%r14),%rsp | lea disp(%rsp),%r12; cmp ...,%r12; then jbe.
GO_STACK_CHECK = re.compile(rb"(?:\x49\x3b\x66[\x10\x18]|\x4c\x8d\x64\x24.\x4d\x3b\x66[\x10\x18]"
                            rb"|\x4c\x8d\xa4\x24.{4}\x4d\x3b\x66[\x10\x18])"
                            rb"(?:\x76(?P<b8>.)|\x0f\x86(?P<b32>.{4}))", re.S)
# Where that jbe goes: spill argument registers to the caller's argument area ([rsp+D], rsp unchanged),
# call runtime.morestack*, reload them, and jump back to the start; the frame is never set up there.
_GO_SPILL = (rb"(?:[\x66\xf2\xf3]?[\x40-\x4f]?(?:\x0f[\x10\x11\x7e\xd6]|[\x88-\x8b])"
             rb"(?:[\x44\x4c\x54\x5c\x64\x6c\x74\x7c]\x24.|[\x84\x8c\x94\x9c\xa4\xac\xb4\xbc]\x24.{4}))")
GO_GROWTH = re.compile(rb"%s*\xe8.{4}%s*(?:\xeb(?P<j8>.)|\xe9(?P<j32>.{4}))" % (_GO_SPILL, _GO_SPILL), re.S)
GO_GROWTH_WINDOW = 256      # bytes read for it: up to 9 integer and 15 float spills and reloads
# sub $X,%rsp; mov %rbp,D(%rsp); lea D(%rsp),%rbp  (imm8/imm32, disp8/disp32), with D = X - 8.
GO_FRAME = re.compile(rb"(?P<sub>\x48\x83\xec(?P<x8>.)|\x48\x81\xec(?P<x32>.{4}))"
                      rb"(?P<mov>\x48\x89\x6c\x24(?P<m8>.)|\x48\x89\xac\x24(?P<m32>.{4}))"
                      rb"(?P<lea>\x48\x8d\x6c\x24(?P<l8>.)|\x48\x8d\xac\x24(?P<l32>.{4}))", re.S)
GO_SAVE_BP = re.compile(rb"\x48\x89\x6c\x24.|\x48\x89\xac\x24.{4}", re.S)      # mov %rbp, D(%rsp)
# mov D(%rsp),%rbp; add $X,%rsp (the epilogue's add is where pc is; ret follows)
GO_RESTORE_BP = (b"\x48\x8b\x6c\x24", b"\x48\x8b\xac\x24")
GO_ADD_RSP = re.compile(rb"\x48\x83\xc4(?P<x8>.)\xc3|\x48\x81\xc4(?P<x32>.{4})\xc3", re.S)


# GDB 13's amd64 prologue unwinder (amd64-tdep.c: amd64_analyze_prologue, amd64_frame_cache),
# the heuristic it falls back on where no table covers a frame. From the function's start (its
# symbol; none known: no analysis) it recognises only an optional endbr64, `push %rbp` and then
# `mov %rsp,%rbp`, comparing each with the frame's pc; any other first instruction means "no
# prologue". A function that starts with the stack-realigning `lea 8(%rsp),%reg` takes another
# path there (saved_sp_reg), not modelled: GDB_STACK_ALIGN. Its `mov %rsp,%rbp` encodings are
# the arch's mov_bp_sp.
GDB_STACK_ALIGN = re.compile(rb"[\x48\x4c]\x8d[\x44\x4c\x54\x5c\x64\x6c\x74\x7c]\x24\x08")


class GdbPrologue(Enum):
    """How far GDB's analysis got at pc: (CFA register, CFA offset, rbp saved at CFA-16)."""
    NONE = ("rsp", 8, False)            # at the start, or no prologue: the return address at [rsp]
    PUSH = ("rsp", 16, True)            # after `push %rbp` alone
    FRAME = ("rbp", 16, True)           # after `push %rbp; mov %rsp,%rbp`


def _number(match, short, long, signed=False):
    raw = match.group(short) if match.group(short) is not None else match.group(long)
    return int.from_bytes(raw, "little", signed=signed)


def go_frame(code: bytes, at: int = 0):
    """(match, X) of Go's frame set-up starting at code[at] (X: the bytes `sub` takes), or None."""
    found = GO_FRAME.match(code, at)
    if found is None:
        return None
    size = _number(found, "x8", "x32", signed=True)
    if not (_number(found, "m8", "m32", True) == _number(found, "l8", "l32", True) == size - 8 and size >= 8):
        return None
    return found, size


@dataclass(frozen=True)
class X86_64(X86):
    def sets_up_frame_pointer(self, code: bytes) -> bool:
        return super().sets_up_frame_pointer(code) or any(
            go_frame(code, m.start()) for m in re.finditer(rb"\x48[\x83\x81]\xec", code))

    def may_save_frame_pointer(self, prologue: Callable[[], Optional[bytes]]) -> bool:
        code = prologue()
        return code is None or super().may_save_frame_pointer(lambda: code) or GO_SAVE_BP.search(code) is not None

    def frame_edge(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        edge = super().frame_edge(read, pc, start)
        if edge is not None:
            return edge
        return self._go_epilogue(read, pc) or self._go_prologue(read, pc, start) \
            or self.stack_growth_edge(read, pc, start)

    def stack_growth_edge(self, read: Read, pc: int, start: Optional[int], exact: bool = True) -> Optional[Edge]:
        if start is None or not start < pc <= start + (1 << 20):
            return None
        head = read(start, 16)
        check = GO_STACK_CHECK.match(head) if head else None
        if check is None:
            return None
        target = start + check.end() + _number(check, "b8", "b32", signed=True)
        if not target <= pc < target + GO_GROWTH_WINDOW:
            return None
        tail = read(target, GO_GROWTH_WINDOW) or read(target, pc - target + 32)
        growth = GO_GROWTH.match(tail) if tail else None
        if growth is None or target + growth.end() + _number(growth, "j8", "j32", signed=True) != start \
                or pc >= target + growth.end():
            return None
        return Edge(FrameEdge.ENTRY, 0, "pc is in Go's stack-growth call at 0x%x, where the stack-bound check at "
                    "the start 0x%x branches before the frame is set up and which jumps back to the start: the "
                    "return address is at [rsp]" % (target, start))

    def debugger_prologue_row(self, read: Read, start: Optional[int], pc: int) -> Optional[PrologueModel]:
        """GDB 13's amd64 prologue unwinder's answer (GdbPrologue), or None where it takes a path not modelled."""
        reached, where = GdbPrologue.NONE, "no function is known at pc: GDB analyses no prologue"
        if start is not None:
            code = read(start, 8)
            if code is None or GDB_STACK_ALIGN.match(code):
                return None
            at = 4 if code.startswith(ENDBR64) else 0
            where = "the function at 0x%x (from symbols) has no `push %%rbp` prologue" % start
            if pc > start + at and code[at] == PUSH_BP:
                framed = code[at + 1:at + 4] in self.mov_bp_sp
                reached, where = GdbPrologue.PUSH, "pc is past `push %%rbp` at 0x%x%s" % (
                    start + at, " and at the `mov %rsp,%rbp` after it" if framed else ", which `mov %rsp,%rbp` "
                    "does not follow")
                if framed and pc > start + at + 1:
                    reached, where = GdbPrologue.FRAME, "pc is past `push %%rbp; mov %%rsp,%%rbp` at 0x%x" % (start + at)
            elif pc <= start + at:
                where = "pc is at the function's start 0x%x" % start
        register, offset, saves_fp = reached.value
        registers = {self.ra: Rule(RuleKind.OFFSET, offset=-8)}
        if saves_fp:
            registers[self.fp] = Rule(RuleKind.OFFSET, offset=-16)
        row = Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=self.number_of(register), offset=offset),
                  registers=registers)
        return PrologueModel(row, "GDB's amd64 prologue unwinder: %s, so CFA=%s+%d" % (where, register, offset))

    def _go_prologue(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        if start is None or not start < pc <= start + 64:
            return None
        code = read(start, pc - start + 24)      # the whole set-up: sub, mov, lea take up to 23 bytes
        if code is None:
            return None
        check = GO_STACK_CHECK.match(code)
        at = check.end() if check else 0
        found = go_frame(code, at)
        if found is None:
            return None
        frame, size = found
        offset = pc - start
        if offset <= frame.start("sub"):      # only the stack-bound check ran: rsp is the entry's
            return Edge(FrameEdge.ENTRY, 0, "pc is in Go's stack-bound check or at `sub $%d, %%rsp` after it "
                        "(start 0x%x): the return address is at [rsp]" % (size, start))
        if offset == frame.start("mov"):
            return Edge(FrameEdge.AFTER_PUSH, 0, "pc is at Go's `mov %%rbp, %d(%%rsp)` after `sub $%d, %%rsp`: "
                        "the return address is at [rsp+%d], rbp is not saved yet" % (size - 8, size, size),
                        Slots(cfa=size + 8, ra=-8, fp=None))
        if offset == frame.start("lea"):
            return Edge(FrameEdge.AFTER_PUSH, 16, "pc is at Go's `lea %d(%%rsp), %%rbp`: the saved rbp is at "
                        "[rsp+%d] and the return address above it" % (size - 8, size - 8),
                        Slots(cfa=size + 8, ra=-8, fp=-16))
        return None

    def _go_epilogue(self, read: Read, pc: int) -> Optional[Edge]:
        code = read(pc, 8)
        found = GO_ADD_RSP.match(code) if code else None
        if found is None:
            return None
        size = _number(found, "x8", "x32", signed=True)
        short, long = read(pc - 5, 5) or b"", read(pc - 8, 8) or b""
        restores = any(len(code) == width + 4 and code[:4] == pattern
                       and int.from_bytes(code[4:], "little", signed=True) == size - 8
                       for code, pattern, width in ((short, GO_RESTORE_BP[0], 1), (long, GO_RESTORE_BP[1], 4)))
        if size < 8 or not restores:
            return None
        return Edge(FrameEdge.AT_RETURN, 0, "pc is at Go's `add $%d, %%rsp` before `ret`, rbp already restored: "
                    "the return address is at [rsp+%d]" % (size, size), Slots(cfa=size + 8, ra=-8, fp=None))


# rt_sigreturn: `mov rax, 15; syscall`. The handler's `ret` popped the
# rt_sigframe's return address, so sp is the ucontext; its uc_mcontext
# (struct sigcontext: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip)
# is 40 bytes in (uc_flags, uc_link, uc_stack).
_SIGCONTEXT = {8: 0, 9: 8, 10: 16, 11: 24, 12: 32, 13: 40, 14: 48, 15: 56, 5: 64, 4: 72, 6: 80,
               3: 88, 1: 96, 0: 104, 2: 112, 7: 120, 16: 128}
SIGRETURNS = (SigReturn(b"\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05", "mov rax, 15; syscall (rt_sigreturn)",
                        40, _SIGCONTEXT),)

ARCH = X86_64(
    name="x86_64", address_size=8, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    vector_names=_VECTOR_NAMES,
    sp=7, fp=6, ra=16, pc=16,
    callee_saved=(3, 6, 12, 13, 14, 15),
    elf_machine=62,
    aliases={"pc": 16, "sp": 7, "fp": 6},
    stack_alignment=8, keeps_frame_records=True, returns=RETURNS,
    sigreturns=SIGRETURNS,
    syscall_result=0,                                 # rax
    mov_bp_sp=(b"\x48\x89\xe5", b"\x48\x8b\xec"),     # mov rbp, rsp (89 /r and 8b /r)
)
