"""i386 (System V DWARF register numbering; 8 is the return-address column)."""

from plugin.arch.x86 import RETURNS, X86

_NAMES = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"]

ARCH = X86(
    name="i386", address_size=4, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=4, fp=5, ra=8, pc=8,
    callee_saved=(3, 5, 6, 7),
    elf_machine=3,
    aliases={"pc": 8, "sp": 4, "fp": 5},
    stack_alignment=4, keeps_frame_records=True, returns=RETURNS,
    mov_bp_sp=(b"\x89\xe5", b"\x8b\xec"),                 # mov ebp, esp (89 /r and 8b /r)
)
