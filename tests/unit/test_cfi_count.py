"""CfiSection.count_fdes (the count in a dump's heading): over a section read
whole it takes a short path (section._count_fdes_in); it must give what the
walk over entry headers gives through page reads, and what walk() meets."""

import struct

import pytest

from plugin.arch import x86_64
from plugin.errors import MemoryReadError
from plugin.formats.cfi import FDE, CfiSection
from plugin.memory import PAGE, Region
from cfi_builder import Builder

PROGRAM = bytes([0x0C, 7, 8, 0x90, 1])


def by_pages(b):
    """The section through a fetch that refuses anything larger than a page:
    all_bytes() fails and count_fdes takes the header walk."""
    data = bytes(b.data)

    def fetch(at, size):
        if size > PAGE:
            raise MemoryReadError(at, size)
        return data[at - b.address:at - b.address + size]
    return Region(b.name, b.address, len(data), fetch, "little" if b.order == "<" else "big")


def eh_frame(order="<"):
    b = Builder(order=order)
    cie = b.cie(PROGRAM)
    for n in range(700):                             # several pages
        b.fde(cie, 0x1000 + 0x10 * n, 0x10, bytes([0x41, 0x0E, 16]))
    b.terminator()
    b.fde(cie, 0x9000, 0x10)                         # after the terminator: not counted
    return b


def debug_frame_64():
    b = Builder("debug_frame")
    cie = b.cie(PROGRAM, is_64=True, augmentation="")
    b.fde(cie, 0x1000, 0x10, is_64=True)
    b.raw(b"\0" * 8)                                 # padding: zero lengths, skipped
    small = b.cie(PROGRAM, augmentation="")
    b.fde(small, 0x2000, 0x10)
    b.fde(small, 0x3000, 0x10)
    return b


def damaged(tail):
    b = Builder()
    cie = b.cie(PROGRAM)
    b.fde(cie, 0x1000, 0x10)
    b.raw(tail)
    b.fde(cie, 0x2000, 0x10)                         # unreachable after a bad header
    return b


@pytest.mark.parametrize("b, expected", [
    (eh_frame(), 700), (eh_frame(">"), 700), (debug_frame_64(), 3),
    (damaged(struct.pack("<I", 0xFFFFFFF0) + b"\0" * 12), 1),    # reserved length
    (damaged(struct.pack("<I", 0x10000)), 1),                    # length past the end
    (damaged(struct.pack("<I", 2) + b"\0\0"), 1),                # too short for its id
    (damaged(struct.pack("<I", 0xFFFFFFFF) + b"\0\0"), 1),       # 64-bit length cut short
    (damaged(b"\0\0"), 1),                                       # a length cut short
])
def test_count_whole_equals_count_by_pages_and_the_walk(b, expected):
    whole = CfiSection(b.region(), b.kind, x86_64.ARCH)
    paged = CfiSection(by_pages(b), b.kind, x86_64.ARCH)
    assert whole.count_fdes() == paged.count_fdes() == expected
    assert sum(isinstance(e, FDE) for e in whole.walk(keep=False)) == expected
