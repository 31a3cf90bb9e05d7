"""LEB128 numbers (DWARF 5 section 7.6), read and written once for every decoder.

The readers take anything indexable by position that gives a byte's value
(bytes, or a lazy view of a Region: memory.Cursor), an end bound and the
most bits a caller accepts; a bad number is a LebError whose kind says
what is wrong, which each caller turns into its own sentence. This module
sits in the bottom layer beside memory.py, whose Cursor reads with it (a
module in plugin/formats could not be imported by memory.py: layers point
down, tests/unit/test_layers.py).
"""
from __future__ import annotations

import enum
from typing import Optional, Tuple

LEB_MAX_BITS = 10 * 64      # the longest LEB128 number any decoder here accepts


class LebProblem(enum.Enum):
    TRUNCATED = "runs past the end"
    TOO_LONG = "is too long"


class LebError(ValueError):
    """A LEB128 number that runs past its end or is longer than its reader accepts."""

    def __init__(self, kind: LebProblem):
        super().__init__("LEB128 number %s" % kind.value)
        self.kind = kind
        self.cause = str(self)


def read_uleb(data, i: int, end: Optional[int] = None, max_bits: int = LEB_MAX_BITS) -> Tuple[int, int]:
    """(value, index after it) of the unsigned LEB128 number at data[i], which must end before
    `end` (default len(data)); LebError when it does not, or when a byte after the first
    max_bits bits says more follow."""
    if end is None:
        end = len(data)
    result = shift = 0
    while i < end:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7
        if shift > max_bits:
            raise LebError(LebProblem.TOO_LONG)
    raise LebError(LebProblem.TRUNCATED)


def read_sleb(data, i: int, end: Optional[int] = None, max_bits: int = LEB_MAX_BITS) -> Tuple[int, int]:
    """(value, index after it) of the signed LEB128 number at data[i]; LebError as read_uleb."""
    start = i
    result, i = read_uleb(data, i, end, max_bits)
    bits = 7 * (i - start)
    if result >> (bits - 1) & 1:
        result -= 1 << bits
    return result, i


def encode_uleb(value: int) -> bytes:
    """LEB128 bytes of a non-negative integer (for building DWARF expressions)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_sleb(value: int) -> bytes:
    """Signed LEB128 bytes of an integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)
