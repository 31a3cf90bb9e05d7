"""i386 (System V DWARF register numbering; 8 is the return-address column)."""

from plugin.arch.base import SigReturn
from plugin.arch.x86 import RETURNS, X86

_NAMES = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"]

# struct sigcontext: gs, fs, es, ds, edi, esi, ebp, esp, ebx, edx, ecx, eax, trapno, err, eip.
_SIGCONTEXT = {7: 16, 6: 20, 5: 24, 4: 28, 3: 32, 2: 36, 1: 40, 0: 44, 8: 56}
# The handler's `ret` popped pretcode, so sp is the frame's `sig` word.
# sigreturn (`pop eax; mov eax, 119; int 0x80`): struct sigcontext follows sig.
# rt_sigreturn (`mov eax, 173; int 0x80`): sig, pinfo, puc, siginfo (128
# bytes), then the ucontext, whose uc_mcontext is 20 bytes in.
SIGRETURNS = (
    SigReturn(b"\x58\xb8\x77\x00\x00\x00\xcd\x80", "pop eax; mov eax, 119; int 0x80 (sigreturn)",
              4, _SIGCONTEXT),
    SigReturn(b"\xb8\xad\x00\x00\x00\xcd\x80", "mov eax, 173; int 0x80 (rt_sigreturn)",
              12 + 128 + 20, _SIGCONTEXT),
)

ARCH = X86(
    name="i386", address_size=4, byteorder="little",
    registers=dict(enumerate(_NAMES)),
    sp=4, fp=5, ra=8, pc=8,
    callee_saved=(3, 5, 6, 7),
    elf_machine=3,
    aliases={"pc": 8, "sp": 4, "fp": 5},
    stack_alignment=4, keeps_frame_records=True, returns=RETURNS,
    sigreturns=SIGRETURNS,
    mov_bp_sp=(b"\x89\xe5", b"\x8b\xec"),                 # mov ebp, esp (89 /r and 8b /r)
)
