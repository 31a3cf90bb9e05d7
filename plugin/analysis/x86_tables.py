"""What plugin.analysis.x86 decodes for jump tables: the loads of a table entry and the bounds on its index.

A switch's table is read only as far as its index can reach. `cmp x, imm`
followed by an unsigned branch (UNSIGNED_BOUND: which edge is bounded)
bounds x (BOUND, BOUND_OF, BOUND_PENDING: plugin.analysis.bounds); a move
of x carries the bound to the register it writes (loaded_bound), and
`movzx reg, byte` bounds reg by 255, or by an earlier compare of the byte
(zero_extended_byte), `and reg, mask` by mask (masked). `[base + i*4 + D]` is
entry i of a table relative to base (relative_entry: x86_64 PIE, i386 PIC);
`mov reg, [T + i*word]` with T absolute loads entry i of a table of code
addresses (absolute_table_load). plugin.analysis.transfer and
plugin.analysis.bounds evaluate the expressions these effects hold.
"""
from __future__ import annotations

from plugin.analysis.bounds import BOUND, BOUND_OF, BOUND_PENDING
from plugin.analysis.ops import OTHER

# branch after `cmp x, N` -> (the edge on which x is bounded, by how much the last index is below N):
# `ja`/`jbe` leave x <= N on one edge, `jae`/`jb` x <= N - 1
UNSIGNED_BOUND = {"ja": ("next", 0), "jnbe": ("next", 0), "jae": ("next", 1), "jnb": ("next", 1),
                  "jbe": ("taken", 0), "jna": ("taken", 0), "jb": ("taken", 1), "jnae": ("taken", 1)}


def index(d, op):
    """The DWARF number of an indexed memory operand's index register, or None."""
    found = d.registers.get(op[1][2]) if op[1][0] == "indexed" else None
    return found[0] if found is not None else None


ENTRY_TEMPORARY = -2               # the table entry `add reg, [base + i*4]` adds, on its way


def relative_entry(d, op):
    """("table", base, 4, disp, index) for a 4-byte operand `[base + index*4 + disp]`: entry `index` of a
    table at base + disp whose entries are relative to base (x86_64's `movsxd r, [base + i*4]`, i386
    PIC code's `mov r, [ebx + i*4 - T]` or `add ebx, [ebx + i*4]` with ebx from a pc thunk); else None."""
    if op is None or op[0] != "mem" or op[1][0] != "indexed" or op[1][1] is None or op[2] != 4:
        return None
    return ("table", op[1][1], 4, op[1][4], index(d, op))


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


def masked(insn, register, mask) -> None:
    """`and reg, mask` (a whole register, 0 <= mask): reg is at most mask (glibc's i386 string functions
    index their tables by `and edi, 0xf`)."""
    insn.effects.append(("set", register, OTHER))
    insn.effects.append(("set", BOUND, ("addr", mask)))
    insn.effects.append(("set", BOUND_OF, ("addr", register)))
