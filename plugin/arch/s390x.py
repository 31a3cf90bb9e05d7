"""s390x (z/Architecture ELF ABI DWARF numbering: r0-r15 = 0-15, f = 16-31)."""

from plugin.arch.base import Arch

_NAMES = {n: "r%d" % n for n in range(16)}
# DWARF 16-31 are the FPRs in the ABI's order f0 f2 f4 f6 f1 f3 f5 f7 f8 f10 ...
_FPR_ORDER = (0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15)
_NAMES.update({16 + i: "f%d" % n for i, n in enumerate(_FPR_ORDER)})
_NAMES[65] = "pswa"

ARCH = Arch(
    name="s390x", address_size=8, byteorder="big",
    registers=_NAMES,
    sp=15, fp=11, ra=14, pc=65,
    callee_saved=tuple(range(6, 16)),
    elf_machine=22,
    aliases={"pc": 65, "sp": 15},
    stack_alignment=8, min_instruction_size=2,
)
