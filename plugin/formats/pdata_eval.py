"""The caller's registers at a pc, by the x64 unwind codes, as Windows'
RtlVirtualUnwind computes them outside an epilogue.

A pure function over a read_memory(address, size) callable and a dict of
register values (names of plugin.formats.pdata_x64.GPR plus "rip"). Only
codes whose prolog offset is at or below the pc's offset in the function
apply (the prolog has run that far); chained records apply whole. Saved
XMM registers are reported as addresses (their 16 bytes are not read).
A pc in an epilogue is recognised from the code there, as Windows does: an
optional `add rsp, imm` or `lea rsp, [frame register + disp]`, then `pop`s,
then `ret` (or `rep ret`) or a `jmp` out of the function; the rest of that
epilogue is then simulated instead of applying the codes.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats.pdata_x64 import GPR, Op, RuntimeFunction, UnwindInfo

ReadMemory = Callable[[int, int], bytes]


@dataclass
class CallerFrame:
    cfa: int                                   # the caller's rsp
    rip: int                                   # the return address
    registers: Dict[str, int]                  # every register of the caller that is known
    saved_at: Dict[str, int] = field(default_factory=dict)   # register -> address it was read from
    xmm_saved_at: Dict[int, int] = field(default_factory=dict)
    cfa_register: str = "rsp"                  # the callee register the CFA was computed from
    epilogue: bool = False                     # pc is in an epilogue, simulated from the code


def _u64(read_memory: ReadMemory, address: int) -> int:
    data = read_memory(address, 8)
    if data is None or len(data) < 8:
        raise DecodeError("stack", None, "cannot read 8 bytes at 0x%x" % address, DecodeKind.UNREADABLE)
    return struct.unpack("<Q", bytes(data))[0]


def unwind_x64(function: RuntimeFunction, infos: List[UnwindInfo], image_base: int,
               pc: int, registers: Dict[str, int], read_memory: ReadMemory,
               parts: Sequence[Tuple[int, int]] = (),
               same_function: Optional[Callable[[int], bool]] = None) -> CallerFrame:
    """The caller's frame of a function stopped at pc; infos from pdata_x64.chain(function).
    parts: the address ranges of the function's other pieces (entries chained to the same
    record), or same_function(address): is it in one of them? A jmp into one of them does not
    leave the function, so it is no epilogue.

    SAVE_NONVOL and SAVE_XMM128 offsets count from the establisher frame, as Windows
    counts them: the frame register minus its offset once SET_FPREG has run, else rsp."""
    regs = dict(registers)
    inside = [(image_base + function.begin, image_base + function.end)] + list(parts)
    epilogue = _epilogue(read_memory, pc, inside, same_function)
    if epilogue is not None:
        return _run_epilogue(epilogue, regs, read_memory)
    saved: Dict[str, int] = {}
    xmm: Dict[int, int] = {}
    base = "rsp"
    offset = pc - (image_base + function.begin)
    for depth, info in enumerate(infos):
        frame = regs["rsp"]
        if info.frame_register and any(c.op == Op.SET_FPREG and (depth or c.offset <= offset) for c in info.codes):
            frame = regs[GPR[info.frame_register]] - info.frame_offset
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
                                      "register" % info.rva, DecodeKind.MALFORMED)
                regs["rsp"] = regs[GPR[info.frame_register]] - info.frame_offset
                base = GPR[info.frame_register]
            elif code.op in (Op.SAVE_NONVOL, Op.SAVE_NONVOL_FAR):
                saved[GPR[code.info]] = frame + code.operand
            elif code.op in (Op.SAVE_XMM128, Op.SAVE_XMM128_FAR):
                xmm[code.info] = frame + code.operand
            elif code.op == Op.PUSH_MACHFRAME:
                base = regs["rsp"] + (8 if code.info else 0)
                regs["rip"] = _u64(read_memory, base)
                regs["rsp"] = _u64(read_memory, base + 24)
                return CallerFrame(regs["rsp"], regs["rip"], regs, saved, xmm)
            elif code.op == Op.EPILOG and info.version == 2:
                continue                    # describes epilogues, not the prolog
            else:
                raise DecodeError(".xdata", None, "x64 unwind code %s is not evaluated" % code.op.name,
                                  DecodeKind.UNSUPPORTED)
    for name, address in saved.items():     # SAVE_NONVOL slots: read once the frame is known
        regs[name] = _u64(read_memory, address)
    regs["rip"] = _u64(read_memory, regs["rsp"])
    regs["rsp"] += 8
    return CallerFrame(regs["rsp"], regs["rip"], regs, saved, xmm, base)


EPILOGUE_WINDOW = 64        # bytes read at pc to recognise an epilogue


def _epilogue(read_memory: ReadMemory, pc: int, inside: List[Tuple[int, int]],
              same_function: Optional[Callable[[int], bool]] = None) -> Optional[List[Tuple[str, int, int]]]:
    """The rest of an epilogue starting at pc, as steps ("add", 0, n), ("lea", reg, disp),
    ("pop", reg, 0), ("ret", 0, 0); None when the code at pc is not one."""
    try:
        code = bytes(read_memory(pc, EPILOGUE_WINDOW) or b"")
    except Exception:                       # noqa: BLE001 (unreadable code: no epilogue seen)
        return None
    steps: List[Tuple[str, int, int]] = []
    n = 0
    if code[n:n + 3] == b"\x48\x83\xc4" and len(code) > n + 3:
        steps.append(("add", 0, code[n + 3]))
        n += 4
    elif code[n:n + 3] == b"\x48\x81\xc4" and len(code) >= n + 7:
        steps.append(("add", 0, struct.unpack_from("<I", code, n + 3)[0]))
        n += 7
    elif len(code) >= 4 and code[0] in (0x48, 0x49) and code[1] == 0x8D \
            and (code[2] & 0x38) == 0x20 and (code[2] >> 6) in (1, 2) and (code[2] & 7) != 4:
        reg = (code[2] & 7) + (8 if code[0] == 0x49 else 0)
        if code[2] >> 6 == 1:
            steps.append(("lea", reg, struct.unpack_from("<b", code, 3)[0]))
            n = 4
        elif len(code) >= 7:
            steps.append(("lea", reg, struct.unpack_from("<i", code, 3)[0]))
            n = 7
    while n < len(code):
        if 0x58 <= code[n] <= 0x5F:
            steps.append(("pop", code[n] - 0x58, 0))
            n += 1
        elif code[n] == 0x41 and n + 1 < len(code) and 0x58 <= code[n + 1] <= 0x5F:
            steps.append(("pop", code[n + 1] - 0x58 + 8, 0))
            n += 2
        else:
            break
    tail = code[n:]
    if tail[:1] == b"\xc3" or tail[:2] == b"\xf3\xc3":
        return steps + [("ret", 0, 0)]
    target = None
    if tail[:1] == b"\xe9" and len(tail) >= 5:
        target = pc + n + 5 + struct.unpack_from("<i", tail, 1)[0]
    elif tail[:1] == b"\xeb" and len(tail) >= 2:
        target = pc + n + 2 + struct.unpack_from("<b", tail, 1)[0]
    elif tail[:2] == b"\xff\x25" or tail[:3] == b"\x48\xff\x25":
        return steps + [("ret", 0, 0)]    # jmp [rip+disp]: a tail call out of the function
    if target is not None and not any(lo <= target < hi for lo, hi in inside) \
            and not (same_function is not None and same_function(target)):
        return steps + [("ret", 0, 0)]
    return None


def _run_epilogue(steps: List[Tuple[str, int, int]], regs: Dict[str, int],
                  read_memory: ReadMemory) -> CallerFrame:
    saved: Dict[str, int] = {}
    for kind, reg, value in steps:
        if kind == "add":
            regs["rsp"] += value
        elif kind == "lea":
            regs["rsp"] = regs[GPR[reg]] + value
        elif kind == "pop":
            saved[GPR[reg]] = regs["rsp"]
            regs[GPR[reg]] = _u64(read_memory, regs["rsp"])
            regs["rsp"] += 8
    regs["rip"] = _u64(read_memory, regs["rsp"])
    regs["rsp"] += 8
    base = next((GPR[reg] for kind, reg, _ in steps if kind == "lea"), "rsp")
    return CallerFrame(regs["rsp"], regs["rip"], regs, saved, {}, base, True)
