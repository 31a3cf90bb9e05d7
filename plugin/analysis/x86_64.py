"""x86_64's registers and ABI facts for the x86 instruction patterns (plugin.analysis.x86)."""
from __future__ import annotations

from plugin.analysis import x86, x86_decoded
from plugin.analysis.x86 import BOUND, BOUND_OF, BOUND_PENDING, is_padding  # noqa: F401  (part of every arch's facts)

CAPSTONE = ("CS_ARCH_X86", "CS_MODE_64")
SP, FP, RA = 7, 6, 16
ENTRY_SP = -8                       # at entry the stack pointer is CFA-8 ...
ENTRY_SLOTS = {-8: RA}              # ... and the return address is stored at CFA-8
RA_REGISTER = None                  # the return address lives on the stack, not in a register
CALLEE_SAVED = (3, 6, 12, 13, 14, 15)
CALL_CLOBBERED = (0, 1, 2, 4, 5, 8, 9, 10, 11)
POINTER_SIZE = 8
PLT_PADDING = ("nop", "xchg ax, ax")                # between PLT stubs
INTERWORKING = False                # code addresses are exact (no Thumb bit)
CALLEE_POPS = False                 # no callee pops its arguments (`ret N`)
DIRECT_CALL_SIZES = (5,)                # the length of a direct call: `call rel32`
PC_THUNKS = False                   # no `mov reg, [rsp]; ret` thunks in 64-bit code
# Windows x64 stack probes called before a frame over a page is allocated: rax holds the size
# (`mov eax, N`), the probe touches each page below rsp and returns with rsp and every register
# but r10, r11 (and the flags) as they were; the caller then does `sub rsp, rax`. __chkstk is
# MSVC's (and clang's for -windows-msvc), ___chkstk_ms MinGW's (which keeps r10, r11 too).
STACK_PROBES = ("__chkstk", "___chkstk_ms")
STACK_PROBE_CLOBBERS = (10, 11)     # r10, r11

_FULL = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"] + ["r%d" % n for n in range(8, 16)]
REGISTERS = {}                      # name -> (DWARF number, is the full 64-bit register)
for _n, _name in enumerate(_FULL):
    REGISTERS[_name] = (_n, True)
for _n, (_e, _w, _l, _h) in enumerate([("eax", "ax", "al", "ah"), ("edx", "dx", "dl", "dh"),
                                       ("ecx", "cx", "cl", "ch"), ("ebx", "bx", "bl", "bh"),
                                       ("esi", "si", "sil", None), ("edi", "di", "dil", None),
                                       ("ebp", "bp", "bpl", None), ("esp", "sp", "spl", None)]):
    for _name in (_e, _w, _l, _h):
        if _name:
            REGISTERS[_name] = (_n, False)
for _n in range(8, 16):
    for _suffix in ("d", "w", "b"):
        REGISTERS["r%d%s" % (_n, _suffix)] = (_n, False)
# xmm0-15 (DWARF 17-32): whole registers to the analysis, so a save by a 16-byte move is tracked
# (non-volatile xmm6-15 under the Windows x64 ABI); a write to ymm/zmm N changes xmmN too.
for _n in range(16):
    REGISTERS["xmm%d" % _n] = (17 + _n, True)
    REGISTERS["ymm%d" % _n] = (17 + _n, False)
    REGISTERS["zmm%d" % _n] = (17 + _n, False)

DIALECT = x86.Dialect(REGISTERS, SP, FP, POINTER_SIZE, pc_name="rip")


# One capstone (address, size, mnemonic, op_str) as an Insn; decode_flow: what the control-flow pass
# (plugin.analysis.noreturn) reads of it, a Step, or None for an instruction that falls through.
_DECODER = x86_decoded.Decoder(DIALECT)
decode, decode_flow = _DECODER.decode, _DECODER.decode_flow
