"""x86_64 (System V psABI DWARF register numbering)."""

from plugin.arch import Arch

_NAMES = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"]

ARCH = Arch(
    name="x86_64", address_size=8, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=7, fp=6, ra=16, pc=16,
    callee_saved=(3, 6, 12, 13, 14, 15),
    elf_machine=62,
    aliases={"pc": 16, "sp": 7, "fp": 6},
)
