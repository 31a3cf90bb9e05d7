"""s390x (z/Architecture ELF ABI DWARF numbering: r0-r15 = 0-15, f = 16-31)."""

from . import Arch

_NAMES = {n: "r%d" % n for n in range(16)}
_NAMES.update({16 + n: "f%d" % n for n in range(16)})
_NAMES[65] = "pswa"

ARCH = Arch(
    name="s390x", address_size=8, byteorder="big",
    registers=_NAMES,
    sp=15, fp=11, ra=14, pc=65,
    callee_saved=tuple(range(6, 16)),
    elf_machine=22,
    aliases={"pc": 65, "sp": 15},
)
