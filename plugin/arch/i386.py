"""i386 (System V DWARF register numbering; 8 is the return-address column)."""

from plugin.arch import Arch

_NAMES = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"]

ARCH = Arch(
    name="i386", address_size=4, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=4, fp=5, ra=8, pc=8,
    callee_saved=(3, 5, 6, 7),
    elf_machine=3,
    aliases={"pc": 8, "sp": 4, "fp": 5},
)
