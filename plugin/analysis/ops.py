"""The small vocabulary per-architecture decoders translate instructions into.

An instruction becomes a list of effects on registers and stack slots, and a
control-flow kind. Only what matters to the stack and to callee-saved
registers is spelled out; any other register an instruction writes is set
to OTHER, so the analysis never believes a register still holds the
caller's value after the code changed it.

Expressions (tuples):
  ("reg", r)                 the value of register r
  ("add", expr, k)           expr + k
  ("load", addr_expr, size)  the stack slot at addr_expr
  ("addr", a)                a known address (rip-relative lea, adrp/add), or a constant moved to x86's
                             accumulator (the size a stack probe takes in rax)
  ("sub", expr, r, why)      expr minus register r when r holds a known constant, else unknown(why)
  ("other",)                 a computed value
  ("unknown", reason)        anything
  ("align", expr, at)        expr rounded down: a fresh stack base named by the instruction
  ("table", base_reg, size, disp)  an entry of a jump table at base_reg + disp, relative to base_reg
  ("target", r1, r2)         table entry + table base: a jump-table target
  ("syscall_sp", r, sp, ns)  the stack pointer after a system call whose number is in register r: sp's
                             value, unknown where r holds one of the numbers ns (a clone's,
                             CLONE_SYSCALLS): on the child's path the stack is the new thread's
Effects:
  ("set", r, expr) and ("store", addr_expr, size, expr) are applied in order,
  each reading the state left by the previous one.
"""
from __future__ import annotations

from enum import Enum
from typing import Optional

# The system calls that start a thread on another stack, by architecture: clone and clone3
CLONE_SYSCALLS = {"x86_64": (56, 435), "i386": (120, 435), "arm": (120, 435), "aarch64": (220, 435)}


def after_syscall(arch: str, sp: int, number_register: int) -> tuple:
    """The effect on the stack pointer of a system call instruction of arch (see ("syscall_sp", ...));
    put before the effects that overwrite the number's register."""
    return ("set", sp, ("syscall_sp", number_register, sp, CLONE_SYSCALLS[arch]))


class Flow(str, Enum):
    NEXT = "next"            # falls through
    JUMP = "jump"            # direct jump to target
    BRANCH = "branch"        # conditional: target or next
    CALL = "call"            # direct (target) or indirect (None) call, then next
    RET = "ret"
    COND_RET = "conditional return"   # returns if its condition holds, else falls through unchanged
    STOP = "stop"            # hlt, ud2, brk: the path ends here
    INDIRECT = "indirect"    # jump to a computed address (jump table or tail call)


class Insn:
    """One decoded instruction (slots: a module holds hundreds of thousands of them)."""
    __slots__ = ("address", "size", "text", "effects", "flow", "target", "indirect", "through_memory",
                 "popped", "bound_kept", "flags_kept", "end")

    def __init__(self, address: int, size: int, text: str, effects: Optional[list] = None,
                 flow: Flow = Flow.NEXT, target: Optional[int] = None, indirect: Optional[tuple] = None,
                 through_memory: bool = False, popped: int = 0, bound_kept: Optional[tuple] = None,
                 flags_kept: bool = True):
        self.address = address
        self.size = size
        self.text = text
        self.effects = [] if effects is None else effects
        self.flow = flow
        self.target = target                  # JUMP, BRANCH, CALL: the direct target
        self.indirect = indirect              # INDIRECT: expression of the target, or ("mem", expr, scale)
        self.through_memory = through_memory  # INDIRECT through a memory operand (GOT slot, vtable)
        self.popped = popped                  # RET: argument bytes it pops besides the return address
        self.bound_kept = bound_kept          # BRANCH after `cmp index, N`: (the path on which index <= N - k,
                                              # k): ("taken", 0) jbe, ("taken", 1) jb, ("next", 0) ja,
                                              # ("next", 1) jae; None: neither
        self.flags_kept = flags_kept          # leaves the flags as they were (x86: mov, lea, push...)
        self.end = address + size             # the next instruction's address (read on every path step)

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other) -> bool:
        return isinstance(other, Insn) and self._fields() == other._fields()

    __hash__ = None

    def __repr__(self) -> str:
        return "Insn(%s)" % ", ".join("%s=%r" % (n, getattr(self, n)) for n in self.__slots__)


class Step:
    """What the control-flow pass reads of a jump, call or return (plugin.analysis.noreturn): one is
    kept for each of the module's until the pass ends, so not the whole Insn (its text, effects)."""
    __slots__ = ("flow", "end", "target", "through_memory", "indirect")

    def __init__(self, flow: Flow, end: int, target: Optional[int] = None, through_memory: bool = False,
                 indirect: Optional[tuple] = None):
        self.flow = flow
        self.end = end
        self.target = target
        self.through_memory = through_memory
        self.indirect = indirect if through_memory else None

    @classmethod
    def of(cls, insn: Insn) -> "Step":
        return cls(insn.flow, insn.end, insn.target, insn.through_memory, insn.indirect)


def reg(number):
    return ("reg", number)


def add(expr, k):
    return ("add", expr, k) if k else expr


OTHER = ("other",)


def operands(op_str: str) -> list:
    """capstone's operand text split at top-level commas, keeping `[..]` and `{..}` together."""
    parts, depth, current = [], 0, ""
    for ch in op_str:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def immediate(text: str):
    """The integer of an immediate operand (`#0x10`, `-4`), or None."""
    text = text.strip().lstrip("#")
    try:
        return int(text, 0)
    except ValueError:
        return None
