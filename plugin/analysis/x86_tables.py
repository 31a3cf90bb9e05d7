"""What plugin.analysis.x86 decodes for jump tables: the loads of a table entry and the bounds on its index.

A switch's table is read only as far as its index can reach. `cmp x, imm`
followed by an unsigned branch (UNSIGNED_BOUND: which edge is bounded)
bounds x (BOUND, BOUND_OF, BOUND_PENDING: plugin.analysis.bounds); a move
of x carries the bound to the register it writes (loaded_bound), and
`movzx reg, byte` bounds reg by 255, or by an earlier compare of the byte
(zero_extended_byte). `mov reg, [T + i*word]` with T absolute loads entry i
of a table of code addresses (absolute_table_load). plugin.analysis.transfer
and plugin.analysis.bounds evaluate the expressions these effects hold.
"""
from __future__ import annotations

from plugin.analysis.bounds import BOUND, BOUND_OF, BOUND_PENDING
from plugin.analysis.ops import OTHER

UNSIGNED_BOUND = {"ja": "next", "jae": "next", "jnbe": "next", "jnb": "next",       # branch -> the edge
                  "jbe": "taken", "jb": "taken", "jna": "taken", "jnae": "taken"}  # the compare bounds


def index(d, op):
    """The DWARF number of an indexed memory operand's index register, or None."""
    found = d.registers.get(op[1][2]) if op[1][0] == "indexed" else None
    return found[0] if found is not None else None


def absolute_table_load(d, insn, first, second) -> bool:
    """`mov reg, [T + index*word]` with T absolute: a table of code addresses (a computed goto's labels,
    a non-PIE switch loaded before `jmp reg`); the register holds entry `index` of T."""
    if first[0] != "reg" or not first[2] or second[0] != "mem" or second[1][0] != "indexed" \
            or second[1][1] is not None or second[1][3] != d.word or (second[2] or d.word) != d.word:
        return False
    insn.effects.append(("set", first[1], ("abs_table", index(d, second), second[1][4], d.word)))
    return True


BOUND_TEMPORARY = -3               # where loaded_bound keeps the compared value's bound for BOUND_OF


def loaded_bound(insn, first, second) -> bool:
    """`mov reg, x` after `cmp x, imm`: the compare bounds reg too (GCC's `cmpl $N,(%rsi); ja; mov (%rsi),%eax`
    and `cmp $N,%edi; ja; mov %edi,%edi`). Read before the move writes reg; True when an effect was added."""
    if first[0] != "reg":
        return False
    if second[0] == "mem" and not second[3]:
        source = ("mem", second[1])
    elif second[0] == "reg":
        source = second[1]
    else:
        return False
    insn.effects.append(("set", BOUND_TEMPORARY, ("bound_load", source, first[1])))
    return True


def byte_source(d, op, op_str) -> bool:
    """Is movzx's source a byte (register or memory)?"""
    if op[0] == "mem":
        return op[2] == 1
    return op[0] == "reg" and op_str.split(",")[-1].strip() in _BYTE_REGISTERS


_BYTE_REGISTERS = frozenset(["al", "bl", "cl", "dl", "ah", "bh", "ch", "dh", "sil", "dil", "bpl", "spl"]
                            + ["r%db" % n for n in range(8, 16)])


def zero_extended_byte(d, insn, first, second) -> None:
    """`movzx reg, byte`: reg is at most 255, or the bound an earlier compare of the byte gave."""
    source = second[1] if second[0] == "reg" else ("mem", second[1])
    insn.effects.append(("set", BOUND_PENDING, ("pending_if", source)))
    insn.effects.append(("set", BOUND, ("narrow", 255, source)))
    insn.effects.append(("set", first[1], OTHER))
    insn.effects.append(("set", BOUND_OF, ("addr", first[1])))
