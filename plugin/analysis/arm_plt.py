"""The GOT slot an Arm PLT entry jumps through, from its instruction words.

A call to an imported function goes through its PLT entry, which binutils'
ld writes in Arm state (a Thumb caller reaches it with `blx`), as three
words (four in the long form) that add the slot's distance to the pc and
load the pc from the slot (some entries start with a Thumb `bx pc` first):

    add ip, pc, #0xNN00000      (long form: add ip, pc, #0xN0000000; add ip, ip, #0xNN00000)
    add ip, ip, #0xNN000
    ldr pc, [ip, #0xNNN]!

The slot's relocation names the imported function (plugin.validate.sources.got_names),
so the analysis can tell a call of `__cxa_throw` or `__libc_fatal` through
the PLT from one that returns.
"""
from __future__ import annotations

from typing import Callable, Optional

# (mask, value, shift of the immediate's low 8 bits or the 12-bit offset): the words in order
SHORT = ((0xFFFFFF00, 0xE28FC600, 20), (0xFFFFFF00, 0xE28CCA00, 12), (0xFFFFF000, 0xE5BCF000, 0))
LONG = ((0xFFFFFFF0, 0xE28FC200, 28), (0xFFFFFF00, 0xE28CC600, 20), (0xFFFFFF00, 0xE28CCA00, 12),
        (0xFFFFF000, 0xE5BCF000, 0))
ARM_PC_AHEAD = 8        # the pc an Arm-state instruction reads is its address + 8
THUMB_PREFIX = b"\x78\x47"     # `bx pc` (then a branch to itself): a Thumb caller's way into the Arm words


def got_slot(read: Callable[[int, int], bytes], entry: int) -> Optional[int]:
    """The GOT slot the Arm PLT entry at `entry` jumps through, or None where its words are not a PLT entry."""
    entry &= ~1
    try:
        if read(entry, 2) == THUMB_PREFIX:
            entry += 4
    except Exception:       # unreadable: not known as a PLT entry
        return None
    for form in (SHORT, LONG):
        try:
            data = read(entry, 4 * len(form))
        except Exception:       # unreadable: not known as a PLT entry
            return None
        if data is None or len(data) < 4 * len(form):
            return None
        distance = 0
        for index, (mask, value, shift) in enumerate(form):
            word = int.from_bytes(data[4 * index:4 * index + 4], "little")
            if word & mask != value:
                break
            distance += (word & ~mask & 0xFFFFFFFF) << shift
        else:
            return (entry + ARM_PC_AHEAD + distance) & 0xFFFFFFFF
    return None
