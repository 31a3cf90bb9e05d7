"""Landing pads: where the unwinder resumes a function during an exception.

A landing pad is reached from no jump: the personality routine resumes
there with the frame of the call that threw. The LSDA (`.gcc_except_table`,
named by the FDE's augmentation data) lists, per call-site range, its
landing pad; the analysis enters each pad with the state after the calls
of its range. Only the call-site table is read (GCC's format).
"""
from __future__ import annotations

from typing import List, Tuple

from plugin.errors import DecodeError, MemoryReadError
from plugin.memory import PE_OMIT, Region

MAX_CALL_SITES = 100000


def call_sites(read, lsda: int, function_start: int, address_size: int = 8) -> List[Tuple[int, int, int]]:
    """[(start, end, landing pad)] of the LSDA at `lsda`; pads of 0 (none) left out."""
    region = Region(".gcc_except_table", lsda, 1 << 20, _bounded(read), "little")
    c = region.cursor(0)
    try:
        lp_encoding = c.u8()
        lp_start = function_start
        if lp_encoding != PE_OMIT:
            lp_start = c.encoded(lp_encoding, address_size)
        if c.u8() != PE_OMIT:
            c.uleb()                          # type table offset
        site_encoding = c.u8()
        length = c.uleb()
        end = c.pos + length
        out = []
        while c.pos < end and len(out) < MAX_CALL_SITES:
            start = c.encoded(site_encoding, address_size)
            size = c.encoded(site_encoding, address_size)
            pad = c.encoded(site_encoding, address_size)
            c.uleb()                          # action
            if pad:
                out.append((function_start + start, function_start + start + size, lp_start + pad))
        return out
    except (DecodeError, MemoryReadError):
        return []


def _bounded(read):
    def fetch(address, size):
        try:
            return read(address, size)
        except MemoryReadError:
            # The region is given a generous size; reads past the mapping
            # fall back to what can be read byte by byte at its end.
            data = b""
            for step in (256, 16, 1):
                while len(data) < size:
                    try:
                        data += read(address + len(data), min(step, size - len(data)))
                    except MemoryReadError:
                        break
            if not data:
                raise
            return data + bytes(size - len(data))
    return fetch
