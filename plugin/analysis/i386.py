"""i386's registers and ABI facts for the x86 instruction patterns (plugin.analysis.x86).

System V i386: DWARF numbers eax=0 ecx=1 edx=2 ebx=3 esp=4 ebp=5 esi=6
edi=7, the return address column 8; ebx, ebp, esi and edi are callee-saved.
Position-independent code loads its own address with a call to a pc thunk
(`__x86.get_pc_thunk.bx`: `mov ebx, [esp]; ret`): a call that returns at
once having set one register, not a frame change (pc_thunk).
"""
from __future__ import annotations

import re
from typing import Optional

from plugin.analysis import x86, x86_decoded
from plugin.analysis.x86 import BOUND, BOUND_OF, BOUND_PENDING  # noqa: F401  (part of every arch's facts)

CAPSTONE = ("CS_ARCH_X86", "CS_MODE_32")
SP, FP, RA = 4, 5, 8
ENTRY_SP = -4                       # at entry the stack pointer is CFA-4 ...
ENTRY_SLOTS = {-4: RA}              # ... and the return address is stored at CFA-4
RA_REGISTER = None                  # the return address lives on the stack, not in a register
CALLEE_SAVED = (3, 5, 6, 7)
CALL_CLOBBERED = (0, 1, 2)
POINTER_SIZE = 4
DIRECT_CALL_SIZES = (5,)                # the length of a direct call: `call rel32`
PC_THUNKS = True                    # calls to `mov reg, [esp]; ret` set reg to the return address
INTERWORKING = False                # code addresses are exact (no Thumb bit)
CALLEE_POPS = True                  # a function returning a struct pops its hidden pointer: `ret 4`
PLT_GOT_REGISTER = 3                # a PIC PLT stub jumps through [ebx + offset]: its caller set ebx to the GOT

REGISTERS = {}                      # name -> (DWARF number, is the full 32-bit register)
for _n, (_e, _w, _l, _h) in enumerate([("eax", "ax", "al", "ah"), ("ecx", "cx", "cl", "ch"),
                                       ("edx", "dx", "dl", "dh"), ("ebx", "bx", "bl", "bh"),
                                       ("esp", "sp", None, None), ("ebp", "bp", None, None),
                                       ("esi", "si", None, None), ("edi", "di", None, None)]):
    REGISTERS[_e] = (_n, True)
    for _name in (_w, _l, _h):
        if _name:
            REGISTERS[_name] = (_n, False)

# 32-bit assemblers pad with these besides nop (`8d 76 00`, `8d b4 26 00 00 00 00`, `89 f6`, ...);
# ld fills the gap after the PLT's first entry with zeros (`00 00`)
PADDING = x86.PADDING + ("lea esi, [esi]", "lea edi, [edi]", "mov esi, esi", "lea esi, cs:[esi]",
                         "lea edi, cs:[edi]", "add byte ptr [eax], al")
PLT_PADDING = ("nop", "xchg ax, ax", "add byte ptr [eax], al")    # between PLT stubs
DIALECT = x86.Dialect(REGISTERS, SP, FP, POINTER_SIZE, call_next_pushes=True)
_THUNK_LOAD = re.compile(r"mov (e[a-z]{2}), dword ptr \[esp\]$")


# One capstone (address, size, mnemonic, op_str) as an Insn; decode_flow: what the control-flow pass
# (plugin.analysis.noreturn) reads of it, a Step, or None for an instruction that falls through.
_DECODER = x86_decoded.Decoder(DIALECT)
decode, decode_flow = _DECODER.decode, _DECODER.decode_flow


def is_padding(text: str) -> bool:
    """Is the instruction (capstone's text) alignment padding between functions?"""
    return x86.is_padding(text, PADDING)


def pc_thunk(first, second) -> Optional[int]:
    """The register a pc thunk whose first two instructions are given loads, or None:
    `mov reg, dword ptr [esp]; ret` sets reg to its return address and returns."""
    if first is None or second is None or second.text != "ret":
        return None
    found = _THUNK_LOAD.match(first.text)
    if found is None or found.group(1) not in REGISTERS or found.group(1) == "esp":
        return None
    return REGISTERS[found.group(1)][0]
