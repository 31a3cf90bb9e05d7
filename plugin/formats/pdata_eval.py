"""The caller's registers at a pc, by the x64 unwind codes, as Windows'
RtlVirtualUnwind computes them outside an epilogue.

A pure function over a read_memory(address, size) callable and a dict of
register values (names of plugin.formats.pdata_x64.GPR plus "rip"). Only
codes whose prolog offset is at or below the pc's offset in the function
apply (the prolog has run that far); chained records apply whole. Saved
XMM registers are reported as addresses (their 16 bytes are not read).
Epilogues are not recognised here (Windows reads them from the code): a pc
inside one gets the body's rules.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List

from plugin.errors import DecodeError
from plugin.formats.pdata_x64 import GPR, Op, RuntimeFunction, UnwindInfo

ReadMemory = Callable[[int, int], bytes]


@dataclass
class CallerFrame:
    cfa: int                                   # the caller's rsp
    rip: int                                   # the return address
    registers: Dict[str, int]                  # every register of the caller that is known
    saved_at: Dict[str, int] = field(default_factory=dict)   # register -> address it was read from
    xmm_saved_at: Dict[int, int] = field(default_factory=dict)


def _u64(read_memory: ReadMemory, address: int) -> int:
    data = read_memory(address, 8)
    if data is None or len(data) < 8:
        raise DecodeError("stack", None, "cannot read 8 bytes at 0x%x" % address)
    return struct.unpack("<Q", bytes(data))[0]


def unwind_x64(function: RuntimeFunction, infos: List[UnwindInfo], image_base: int,
               pc: int, registers: Dict[str, int], read_memory: ReadMemory) -> CallerFrame:
    """The caller's frame of a function stopped at pc; infos from pdata_x64.chain(function)."""
    regs = dict(registers)
    saved: Dict[str, int] = {}
    xmm: Dict[int, int] = {}
    offset = pc - (image_base + function.begin)
    for depth, info in enumerate(infos):
        for code in info.codes:
            if depth == 0 and code.offset > offset:
                continue                    # that part of the prolog has not run yet
            if code.op == Op.PUSH_NONVOL:
                saved[GPR[code.info]] = regs["rsp"]
                regs[GPR[code.info]] = _u64(read_memory, regs["rsp"])
                regs["rsp"] += 8
            elif code.op in (Op.ALLOC_LARGE, Op.ALLOC_SMALL):
                regs["rsp"] += code.operand
            elif code.op == Op.SET_FPREG:
                if not info.frame_register:
                    raise DecodeError(".xdata", None, "x64 SET_FPREG in UNWIND_INFO at RVA 0x%x with no frame "
                                      "register" % info.rva)
                regs["rsp"] = regs[GPR[info.frame_register]] - info.frame_offset
            elif code.op in (Op.SAVE_NONVOL, Op.SAVE_NONVOL_FAR):
                saved[GPR[code.info]] = regs["rsp"] + code.operand
            elif code.op in (Op.SAVE_XMM128, Op.SAVE_XMM128_FAR):
                xmm[code.info] = regs["rsp"] + code.operand
            elif code.op == Op.PUSH_MACHFRAME:
                base = regs["rsp"] + (8 if code.info else 0)
                regs["rip"] = _u64(read_memory, base)
                regs["rsp"] = _u64(read_memory, base + 24)
                return CallerFrame(regs["rsp"], regs["rip"], regs, saved, xmm)
            elif code.op == Op.EPILOG and info.version == 2:
                continue                    # describes epilogues, not the prolog
            else:
                raise DecodeError(".xdata", None, "x64 unwind code %s is not evaluated" % code.op.name)
    for name, address in saved.items():     # SAVE_NONVOL slots: read once the frame is known
        regs[name] = _u64(read_memory, address)
    regs["rip"] = _u64(read_memory, regs["rsp"])
    regs["rsp"] += 8
    return CallerFrame(regs["rsp"], regs["rip"], regs, saved, xmm)
