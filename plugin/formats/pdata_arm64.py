"""ARM64 Windows unwind data: the 8-byte .pdata entries (packed, Flag=1 and
Flag=2 fragments, or the RVA of an .xdata record) and the unpacked .xdata
records: header (extended form too), epilogue scopes or the packed epilogue,
and the unwind codes split into opcodes, each named.

Facts from Microsoft's "ARM64 exception handling" documentation. Reads
through read(rva, size) (plugin.formats.pe.rva_reader); bad input raises
plugin.errors.DecodeError.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import pe

Read = Callable[[int, int], bytes]


class PdataFlag(enum.IntEnum):
    XDATA = 0          # the word is the RVA of an .xdata record
    PACKED = 1         # one prologue and one epilogue, described by the fields
    FRAGMENT = 2       # packed, code with neither prologue nor epilogue
    RESERVED = 3


class CR(enum.IntEnum):
    UNCHAINED = 0
    UNCHAINED_SAVED_LR = 1
    CHAINED_PAC = 2
    CHAINED = 3


@dataclass(frozen=True)
class Packed:
    function_length: int   # bytes
    reg_f: int             # the field: 0 none, else d8..d(8+reg_f) saved
    reg_i: int             # x19.. saved
    homed: bool            # H: x0-x7 homed
    cr: CR
    frame_size: int        # bytes


@dataclass(frozen=True)
class Entry:
    begin: int             # RVA
    flag: PdataFlag
    xdata: Optional[int]   # RVA when flag is XDATA
    packed: Optional[Packed]


@dataclass(frozen=True)
class EpilogueScope:
    offset: int            # bytes from the function's start
    start_index: int       # byte index into the unwind codes


@dataclass(frozen=True)
class Opcode:
    name: str
    raw: bytes
    index: int             # byte index in the unwind codes


@dataclass(frozen=True)
class XData:
    rva: int
    function_length: int   # bytes
    version: int
    has_exception_data: bool
    epilogue_packed: bool
    epilogue_count: int    # scopes, or (packed) the start index of the single epilogue
    code_words: int
    scopes: Tuple[EpilogueScope, ...]
    codes: bytes
    handler: Optional[int]


def _packed(word: int) -> Packed:
    return Packed((word >> 2 & 0x7FF) * 4, word >> 13 & 7, word >> 16 & 0xF,
                  bool(word >> 20 & 1), CR(word >> 21 & 3), (word >> 23 & 0x1FF) * 16)


def read_entries(read: Read, rva: int, size: int) -> List[Entry]:
    """The entries of the exception directory at rva."""
    entries = []
    for begin, word in pe.exception_entries(read, rva, size, "<II"):
        flag = PdataFlag(word & 3)
        entries.append(Entry(begin, flag, word if flag == PdataFlag.XDATA else None,
                             _packed(word) if flag in (PdataFlag.PACKED, PdataFlag.FRAGMENT)
                             else None))
    return entries


def read_xdata(read: Read, rva: int) -> XData:
    (word,) = struct.unpack("<I", read(rva, 4))
    length, version = (word & 0x3FFFF) * 4, word >> 18 & 3
    x, e = bool(word >> 20 & 1), bool(word >> 21 & 1)
    epilogues, words = word >> 22 & 0x1F, word >> 27 & 0x1F
    at = rva + 4
    if epilogues == 0 and words == 0:
        (ext,) = struct.unpack("<I", read(at, 4))
        epilogues, words = ext & 0xFFFF, ext >> 16 & 0xFF
        at += 4
    scopes = []
    if not e:
        raw = read(at, 4 * epilogues)
        for n in range(epilogues):
            (s,) = struct.unpack_from("<I", raw, 4 * n)
            scopes.append(EpilogueScope((s & 0x3FFFF) * 4, s >> 22))
        at += 4 * epilogues
    codes = read(at, 4 * words)
    at += 4 * words
    handler = struct.unpack("<I", read(at, 4))[0] if x else None
    for scope in scopes:
        if scope.start_index >= len(codes) or scope.offset >= length:
            raise DecodeError(".xdata", rva - 0, "epilogue scope at 0x%x index %d is outside the "
                              "function (%d bytes) or the codes (%d bytes)"
                              % (scope.offset, scope.start_index, length, len(codes)), DecodeKind.MALFORMED)
    return XData(rva, length, version, x, e, epilogues, words, tuple(scopes), codes, handler)


# first byte ranges -> (name, length in bytes)
_OPCODES = ((0x00, 0x1F, "alloc_s", 1), (0x20, 0x3F, "save_r19r20_x", 1),
            (0x40, 0x7F, "save_fplr", 1), (0x80, 0xBF, "save_fplr_x", 1),
            (0xC0, 0xC7, "alloc_m", 2), (0xC8, 0xCB, "save_regp", 2),
            (0xCC, 0xCF, "save_regp_x", 2), (0xD0, 0xD3, "save_reg", 2),
            (0xD4, 0xD5, "save_reg_x", 2), (0xD6, 0xD7, "save_lrpair", 2),
            (0xD8, 0xD9, "save_fregp", 2), (0xDA, 0xDB, "save_fregp_x", 2),
            (0xDC, 0xDD, "save_freg", 2), (0xDE, 0xDE, "save_freg_x", 2),
            (0xDF, 0xDF, "alloc_z", 2), (0xE0, 0xE0, "alloc_l", 4),
            (0xE1, 0xE1, "set_fp", 1), (0xE2, 0xE2, "add_fp", 2), (0xE3, 0xE3, "nop", 1),
            (0xE4, 0xE4, "end", 1), (0xE5, 0xE5, "end_c", 1), (0xE6, 0xE6, "save_next", 1),
            (0xE7, 0xE7, "save_any_reg", 3), (0xE8, 0xE8, "trap_frame", 1),
            (0xE9, 0xE9, "machine_frame", 1), (0xEA, 0xEA, "context", 1),
            (0xEB, 0xEB, "ec_context", 1), (0xEC, 0xEC, "clear_unwound_to_call", 1),
            (0xF8, 0xF8, "reserved", 2), (0xF9, 0xF9, "reserved", 3),
            (0xFA, 0xFA, "reserved", 4), (0xFB, 0xFB, "reserved", 5),
            (0xFC, 0xFC, "pac_sign_lr", 1))


def _opcode_at(first: int):
    for lo, hi, name, size in _OPCODES:
        if lo <= first <= hi:
            return name, size
    return "reserved", 1


def opcodes(codes: bytes, start: int = 0) -> List[Opcode]:
    """The opcodes from byte index start up to and including the first end/end_c (or the
    codes' end), bounded by their length."""
    out = []
    n = start
    while n < len(codes):
        name, size = _opcode_at(codes[n])
        if n + size > len(codes):
            raise DecodeError(".xdata", None, "opcode %s at code byte %d needs %d bytes, %d left"
                              % (name, n, size, len(codes) - n), DecodeKind.TRUNCATED)
        out.append(Opcode(name, bytes(codes[n:n + size]), n))
        n += size
        if name in ("end", "end_c"):
            break
    return out


def operand(op: Opcode) -> int:
    """The opcode's main operand in bytes (allocation size, save offset), or its register
    field for add_fp; 0 for those that have none."""
    b = op.raw
    small = {"alloc_s": (b[0] & 0x1F) * 16, "save_r19r20_x": (b[0] & 0x1F) * 8,
             "save_fplr": (b[0] & 0x3F) * 8, "save_fplr_x": ((b[0] & 0x3F) + 1) * 8}
    if op.name in small:
        return small[op.name]
    if op.name == "alloc_m":
        return ((b[0] & 7) << 8 | b[1]) * 16
    if op.name == "alloc_l":
        return (b[1] << 16 | b[2] << 8 | b[3]) * 16
    if op.name == "add_fp":
        return b[1] * 8
    if op.name in ("save_regp_x", "save_fregp_x"):
        return ((b[1] & 0x3F) + 1) * 8
    if op.name in ("save_reg_x", "save_freg_x"):
        return ((b[1] & 0x1F) + 1) * 8
    if op.name in ("save_regp", "save_reg", "save_lrpair", "save_fregp", "save_freg"):
        return (b[1] & 0x3F) * 8
    return 0


def register(op: Opcode) -> Optional[str]:
    """The first register an opcode saves, or None."""
    b = op.raw
    if op.name in ("save_regp", "save_regp_x", "save_reg"):
        return "x%d" % (19 + ((b[0] & 3) << 2 | b[1] >> 6))
    if op.name == "save_reg_x":
        return "x%d" % (19 + ((b[0] & 1) << 3 | b[1] >> 5))
    if op.name == "save_lrpair":
        return "x%d" % (19 + 2 * ((b[0] & 1) << 2 | b[1] >> 6))
    if op.name in ("save_fregp", "save_fregp_x", "save_freg"):
        return "d%d" % (8 + ((b[0] & 1) << 2 | b[1] >> 6))
    if op.name == "save_freg_x":
        return "d%d" % (8 + (b[1] >> 5))
    if op.name == "save_r19r20_x":
        return "x19"
    if op.name in ("save_fplr", "save_fplr_x"):
        return "x29"
    return None
