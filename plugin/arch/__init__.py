"""Per-architecture facts, looked up by name.

An Arch says how wide a pointer is, which DWARF register numbers are the
stack pointer, frame pointer and return-address column, what each number is
called, and which registers a callee must preserve. Everything else in the
core takes these facts from here instead of assuming x86_64.

It also holds the architecture's instruction facts, which strategies ask
for instead of branching on the architecture's name:

  call_before(read, address)   the call instruction a return address follows
  return_at(read, pc)          the return instruction at pc (one table per arch)
  entry_row(pc)                the ABI's rule where only the return address is
                               on the stack: a function's first instruction
                               and a return instruction
  frame_edge(read, pc, start)  where a frame record is not (yet, any more) set
                               up: entry, half-built record, return
  sets_up_frame_pointer(code), may_save_frame_pointer(code)
                               prologue patterns
  chain_layout(code)           where a prologue's frame record lies when it is
                               not the ABI's usual one (Go on arm64)
  stack_alignment, pointer_auth, keeps_frame_records, min_instruction_size
  child_of_clone(read, pc, registers)
                               the registers and code that show a thread's
                               first instant on the child side of clone/clone3
  entries_in(code, base)       where a frame-record prologue opens a function
                               in code read at base, nearest the end first
  sigreturn_at(read, pc)       the kernel's signal trampoline (a sigreturn
                               system call) starting at pc, with the layout of
                               the registers the kernel saved on the stack
  debugger_prologue_row(read, start, pc)
                               the row the debugger's own prologue heuristic
                               gives where no table covers a frame (GDB's amd64
                               prologue unwinder), as a model: plugin/debugger_heuristic.py

The base class knows no instructions (every answer is "not known"); x86.py
(shared by x86_64 and i386) and aarch64.py hold the encodings. `read` is a
function (address, size) -> bytes, or None when the memory is unreadable.
"""
from __future__ import annotations

from plugin.arch.base import (  # the names every caller imports from plugin.arch
    Read,
    CLONE_FUNCTIONS,
    FrameEdge,
    Edge,
    Slots,
    ChainLayout,
    SigReturn,
    PrologueModel,
    reader,
    Arch)
from plugin.arch import aarch64, arm, i386, s390x, x86_64

__all__ = ["Read", "CLONE_FUNCTIONS", "FrameEdge", "Edge", "Slots", "ChainLayout", "SigReturn",
           "PrologueModel", "reader", "Arch", "BY_NAME", "BY_ELF_MACHINE", "by_name"]

BY_NAME = {a.name: a for a in (x86_64.ARCH, aarch64.ARCH, i386.ARCH, s390x.ARCH, arm.ARCH)}
BY_ELF_MACHINE = {a.elf_machine: a for a in BY_NAME.values()}


def by_name(name):
    """Arch for a debugger's or ELF's architecture name ('i386:x86-64', 'aarch64'...)."""
    key = name.lower()
    for alias, arch in (("x86-64", "x86_64"), ("x86_64", "x86_64"), ("amd64", "x86_64"),
                        ("aarch64", "aarch64"), ("arm64", "aarch64"),
                        ("s390", "s390x"), ("i386", "i386"), ("i686", "i386"), ("x86", "i386"), ("arm", "arm")):
        if alias in key:
            return BY_NAME[arch]
    raise KeyError("unsupported architecture %r" % name)

