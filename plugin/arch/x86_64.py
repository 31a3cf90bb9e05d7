"""x86_64 (System V psABI DWARF register numbering)."""

from plugin.arch.x86 import RETURNS, X86

_NAMES = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"]

ARCH = X86(
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
