"""x64 Windows unwind data: RUNTIME_FUNCTION entries of .pdata and the
UNWIND_INFO records of .xdata they point to, with every unwind code.

Facts from Microsoft's "x64 exception handling" documentation (the slot
counts of codes 6 and 7 as LLVM's Win64EH and the .NET unwinder count them).
Reads through read(rva, size) (plugin.formats.pe.rva_reader). Bad input
raises plugin.errors.DecodeError; chained records are followed at most
MAX_CHAIN deep, so a looping chain ends with a clear error.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import pe

Read = Callable[[int, int], bytes]
MAX_CHAIN = 32

# Register numbers of UNWIND_CODE.OpInfo and FrameRegister
GPR = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
       "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")


class Flag(enum.IntFlag):
    EHANDLER = 1
    UHANDLER = 2
    CHAININFO = 4


class Op(enum.IntEnum):
    PUSH_NONVOL = 0
    ALLOC_LARGE = 1
    ALLOC_SMALL = 2
    SET_FPREG = 3
    SAVE_NONVOL = 4
    SAVE_NONVOL_FAR = 5
    EPILOG = 6             # version 2; SAVE_XMM (2 slots) in version 1
    SPARE_CODE = 7         # version 2; SAVE_XMM_FAR (3 slots) in version 1
    SAVE_XMM128 = 8
    SAVE_XMM128_FAR = 9
    PUSH_MACHFRAME = 10


@dataclass(frozen=True)
class RuntimeFunction:
    begin: int             # RVAs
    end: int
    unwind_info: int


@dataclass(frozen=True)
class UnwindCode:
    offset: int            # prolog offset: the code applies once pc - begin >= offset
    op: Op
    info: int              # OpInfo
    operand: int           # bytes allocated, save offset, or (EPILOG) epilog offset/size
    slots: int


@dataclass(frozen=True)
class UnwindInfo:
    rva: int
    version: int
    flags: Flag
    prolog_size: int
    frame_register: int    # 0: none
    frame_offset: int      # bytes (the field scaled by 16)
    codes: Tuple[UnwindCode, ...]
    handler: Optional[int]           # RVA of the language handler
    chained: Optional[RuntimeFunction]


def read_runtime_functions(read: Read, rva: int, size: int) -> List[RuntimeFunction]:
    """The entries of the exception directory at rva."""
    return [RuntimeFunction(*fields) for fields in pe.exception_entries(read, rva, size, "<III")]


def find(entries: List[RuntimeFunction], rva: int) -> Optional[RuntimeFunction]:
    """Binary search of entries sorted by begin for the one holding rva."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].begin <= rva:
            lo = mid + 1
        else:
            hi = mid
    if lo and entries[lo - 1].begin <= rva < entries[lo - 1].end:
        return entries[lo - 1]
    return None


def _slots(op: int, info: int, version: int) -> int:
    if op == Op.ALLOC_LARGE:
        return 2 if info == 0 else 3
    if op in (Op.SAVE_NONVOL, Op.SAVE_XMM128, Op.EPILOG):
        return 2 if op != Op.EPILOG or version == 1 else 1
    if op in (Op.SAVE_NONVOL_FAR, Op.SAVE_XMM128_FAR, Op.SPARE_CODE):
        return 3
    return 1


def decode_codes(raw: bytes, count: int, version: int) -> Tuple[UnwindCode, ...]:
    """The codes of one UNWIND_INFO's array of count slots."""
    if len(raw) < 2 * count:
        raise DecodeError(".xdata", None, "x64 unwind codes: %d slots, %d bytes" % (count, len(raw)),
                          DecodeKind.TRUNCATED)
    codes = []
    n = 0
    while n < count:
        offset, byte = raw[2 * n], raw[2 * n + 1]
        op, info = byte & 0xF, byte >> 4
        if op > Op.PUSH_MACHFRAME:
            raise DecodeError(".xdata", None, "x64 unwind code %d: unknown operation %d" % (n, op),
                              DecodeKind.UNSUPPORTED)
        slots = _slots(op, info, version)
        if n + slots > count:
            raise DecodeError(".xdata", None, "x64 unwind code %d (%s) needs %d slots, %d left"
                              % (n, Op(op).name, slots, count - n), DecodeKind.TRUNCATED)
        nxt = struct.unpack_from("<H", raw, 2 * n + 2)[0] if slots > 1 else 0
        big = struct.unpack_from("<I", raw, 2 * n + 2)[0] if slots > 2 else 0
        operand = {Op.ALLOC_LARGE: nxt * 8 if info == 0 else big,
                   Op.ALLOC_SMALL: info * 8 + 8,
                   Op.SAVE_NONVOL: nxt * 8, Op.SAVE_NONVOL_FAR: big,
                   Op.SAVE_XMM128: nxt * 16, Op.SAVE_XMM128_FAR: big,
                   Op.EPILOG: (offset | info << 8) if version == 2 else nxt * 16,
                   Op.SPARE_CODE: big}.get(op, 0)
        codes.append(UnwindCode(offset, Op(op), info, operand, slots))
        n += slots
    return tuple(codes)


def read_unwind_info(read: Read, rva: int) -> UnwindInfo:
    """The UNWIND_INFO at rva (its chained RUNTIME_FUNCTION read, not followed)."""
    head = read(rva, 4)
    version, flags = head[0] & 7, head[0] >> 3
    if version not in (1, 2):
        raise DecodeError(".xdata", None, "x64 UNWIND_INFO at RVA 0x%x: version %d (1 or 2 expected)"
                          % (rva, version), DecodeKind.UNSUPPORTED)
    count = head[2]
    raw = read(rva + 4, 2 * count) if count else b""
    codes = decode_codes(raw, count, version)
    after = rva + 4 + 2 * (count + (count & 1))
    handler = chained = None
    if flags & Flag.CHAININFO:
        chained = RuntimeFunction(*struct.unpack("<III", read(after, 12)))
    elif flags & (Flag.EHANDLER | Flag.UHANDLER):
        handler = struct.unpack("<I", read(after, 4))[0]
    return UnwindInfo(rva, version, Flag(flags), head[1], head[3] & 0xF,
                      (head[3] >> 4) * 16, codes, handler, chained)


def chain(read: Read, function: RuntimeFunction) -> List[UnwindInfo]:
    """The function's UNWIND_INFO and those it chains to, in unwinding order."""
    infos: List[UnwindInfo] = []
    seen = set()
    rva = function.unwind_info
    while True:
        if rva in seen or len(infos) >= MAX_CHAIN:
            raise DecodeError(".xdata", None, "x64 chained unwind info at RVA 0x%x loops or is deeper than %d"
                              % (rva, MAX_CHAIN), DecodeKind.LIMIT)
        seen.add(rva)
        info = read_unwind_info(read, rva)
        infos.append(info)
        if info.chained is None:
            return infos
        rva = info.chained.unwind_info
