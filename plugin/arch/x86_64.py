"""x86_64 (System V psABI DWARF register numbering)."""

from plugin.arch import SigReturn
from plugin.arch.x86 import RETURNS, X86

_NAMES = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
          "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"]

# rt_sigreturn: `mov rax, 15; syscall`. The handler's `ret` popped the
# rt_sigframe's return address, so sp is the ucontext; its uc_mcontext
# (struct sigcontext: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip)
# is 40 bytes in (uc_flags, uc_link, uc_stack).
_SIGCONTEXT = {8: 0, 9: 8, 10: 16, 11: 24, 12: 32, 13: 40, 14: 48, 15: 56, 5: 64, 4: 72, 6: 80,
               3: 88, 1: 96, 0: 104, 2: 112, 7: 120, 16: 128}
SIGRETURNS = (SigReturn(b"\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05", "mov rax, 15; syscall (rt_sigreturn)",
                        40, _SIGCONTEXT),)

ARCH = X86(
    name="x86_64", address_size=8, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=7, fp=6, ra=16, pc=16,
    callee_saved=(3, 6, 12, 13, 14, 15),
    elf_machine=62,
    aliases={"pc": 16, "sp": 7, "fp": 6},
    stack_alignment=8, keeps_frame_records=True, returns=RETURNS,
    sigreturns=SIGRETURNS,
    mov_bp_sp=(b"\x48\x89\xe5", b"\x48\x8b\xec"),     # mov rbp, rsp (89 /r and 8b /r)
)
