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

import re
from dataclasses import dataclass
from typing import Callable, Optional

from plugin.arch import Edge, FrameEdge, Read, Slots
from plugin.arch.x86 import RETURNS, X86

_NAMES = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"]

# Go's stack-bound check (rsp unchanged): cmp 0x10/0x18(%r14),%rsp | lea disp(%rsp),%r12; cmp ...,%r12; then jbe.
GO_STACK_CHECK = re.compile(rb"(?:\x49\x3b\x66[\x10\x18]|\x4c\x8d\x64\x24.\x4d\x3b\x66[\x10\x18]"
                            rb"|\x4c\x8d\xa4\x24.{4}\x4d\x3b\x66[\x10\x18])"
                            rb"(?:\x76.|\x0f\x86.{4})", re.S)
# sub $X,%rsp; mov %rbp,D(%rsp); lea D(%rsp),%rbp  (imm8/imm32, disp8/disp32), with D = X - 8.
GO_FRAME = re.compile(rb"(?P<sub>\x48\x83\xec(?P<x8>.)|\x48\x81\xec(?P<x32>.{4}))"
                      rb"(?P<mov>\x48\x89\x6c\x24(?P<m8>.)|\x48\x89\xac\x24(?P<m32>.{4}))"
                      rb"(?P<lea>\x48\x8d\x6c\x24(?P<l8>.)|\x48\x8d\xac\x24(?P<l32>.{4}))", re.S)
GO_SAVE_BP = re.compile(rb"\x48\x89\x6c\x24.|\x48\x89\xac\x24.{4}", re.S)      # mov %rbp, D(%rsp)
# mov D(%rsp),%rbp; add $X,%rsp (the epilogue's add is where pc is; ret follows)
GO_RESTORE_BP = (b"\x48\x8b\x6c\x24", b"\x48\x8b\xac\x24")
GO_ADD_RSP = re.compile(rb"\x48\x83\xc4(?P<x8>.)\xc3|\x48\x81\xc4(?P<x32>.{4})\xc3", re.S)


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
        return self._go_epilogue(read, pc) or self._go_prologue(read, pc, start)

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


ARCH = X86_64(
    name="x86_64", address_size=8, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=7, fp=6, ra=16, pc=16,
    callee_saved=(3, 6, 12, 13, 14, 15),
    elf_machine=62,
    aliases={"pc": 16, "sp": 7, "fp": 6},
    stack_alignment=8, keeps_frame_records=True, returns=RETURNS,
    syscall_result=0,                                 # rax
    mov_bp_sp=(b"\x48\x89\xe5", b"\x48\x8b\xec"),     # mov rbp, rsp (89 /r and 8b /r)
)
