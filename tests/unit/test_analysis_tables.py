"""Absolute jump tables bounded by the range check before them (plugin.analysis.bounds).

The code was assembled by GNU as (x86_64) from

    push %rbx; cmp $2,%edi; <branch> out; mov %edi,%edi; jmp *0x1080(,%rdi,8)
    case0: mov $1,%eax; pop %rbx; ret    case1: mov $2,%eax; pop %rbx; ret
    case2: mov $3,%eax   out: pop %rbx; ret

with <branch> `ja` (a range check), `je` (not one), and `test %eax,%eax; ja`
(the compare's flags overwritten before the branch). The table at 0x1080
holds the three cases' addresses, followed by zeros.
"""

import struct

from plugin.analysis import CodeAnalysis
from plugin.arch import BY_NAME

BASE, TABLE = 0x1000, 0x1080
TAIL = "b8010000005bc3b8020000005bc3b8030000005bc3"      # case0 case1 case2/out
RANGE_CHECK = "5383ff02771c89ffff24fd80100000" + TAIL       # jmp at +8, cases at +0xf +0x16 +0x1d
EQUALITY = "5383ff02741c89ffff24fd80100000" + TAIL
FLAGS_OVERWRITTEN = "5383ff0285c0771c89ffff24fd80100000" + TAIL   # jmp at +0xa, cases +0x11 +0x18 +0x1f


def analyse(code_hex, cases):
    code = bytes.fromhex(code_hex).ljust(TABLE - BASE, b"\xcc")
    code += struct.pack("<3Q", *(BASE + c for c in cases)) + bytes(64)

    def read(address, size):
        offset = address - BASE
        if offset < 0 or offset + size > len(code):
            raise ValueError("outside the code")
        return code[offset:offset + size]
    end = BASE + len(bytes.fromhex(code_hex))
    analysis = CodeAnalysis(BY_NAME["x86_64"], read, [(BASE, end)])
    return analysis.function(BASE, end)


def test_a_range_check_bounds_the_table():
    result = analyse(RANGE_CHECK, (0xf, 0x16, 0x1d))
    table, entries, bounded, targets = result.tables[BASE + 8]
    assert (table, entries, bounded) == (TABLE, 3, True)
    assert targets == (BASE + 0xf, BASE + 0x16, BASE + 0x1d)
    assert not result.unresolved and all(BASE + c in result.states for c in (0xf, 0x16, 0x1d))


def test_an_equality_compare_is_no_bound():
    result = analyse(EQUALITY, (0xf, 0x16, 0x1d))
    _, entries, bounded, _ = result.tables[BASE + 8]
    assert (entries, bounded) == (3, False)     # read while the entries are the function's code


def test_flags_overwritten_before_the_branch_are_no_bound():
    result = analyse(FLAGS_OVERWRITTEN, (0x11, 0x18, 0x1f))
    _, entries, bounded, _ = result.tables[BASE + 0xa]
    assert (entries, bounded) == (3, False)
