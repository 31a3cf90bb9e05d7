"""The ORC decoder (plugin.formats.orc) and its rules (plugin.formats.orc_rules) on
tables built here, byte by byte, from the layouts in the kernel's orc_types.h.
The kernel's own tables are checked against objtool in tests/realworld/test_orc_kernel.py."""
import struct

import pytest

from plugin.errors import DecodeError
from plugin.formats import orc
from plugin.formats.orc import Layout, LayoutFoundBy, OrcReg, OrcType
from plugin.formats.orc_rules import Frame, Outcome, PT_REGS, apply, step, word_reader


def flags(sp_reg, bp_reg, type_bits, layout, end=False, signal=False):
    value = sp_reg | bp_reg << 4 | type_bits << 8
    if layout is Layout.V1:
        value |= end << 10
    elif layout is Layout.V2:
        value |= signal << 10 | end << 11
    else:
        value |= signal << 11
    return value


def table(rows, layout, ip_address=0x10000, entries_address=0x20000):
    """An OrcTable over rows of (ip, sp_offset, bp_offset, flags) laid out in a dict memory."""
    ip_bytes = b"".join(struct.pack("<i", ip - (ip_address + 4 * i)) for i, (ip, *_rest) in enumerate(rows))
    entry_bytes = b"".join(struct.pack("<hhH", sp, bp, f) for _ip, sp, bp, f in rows)
    blobs = ((ip_address, ip_bytes), (entries_address, entry_bytes))

    def read(address, size):
        for base, blob in blobs:
            if base <= address and address + size <= base + len(blob):
                return blob[address - base:address - base + size]
        raise ValueError("outside")
    return orc.OrcTable(ip_address, entries_address, len(rows), layout, read), ip_bytes, entry_bytes


@pytest.mark.parametrize("layout, type_bits, expected", [
    (Layout.V1, 0, OrcType.CALL), (Layout.V1, 1, OrcType.REGS), (Layout.V1, 2, OrcType.REGS_PARTIAL),
    (Layout.V2, 0, OrcType.CALL), (Layout.V2, 2, OrcType.REGS_PARTIAL),
    (Layout.V3, 0, OrcType.UNDEFINED), (Layout.V3, 1, OrcType.END_OF_STACK), (Layout.V3, 2, OrcType.CALL),
    (Layout.V3, 3, OrcType.REGS), (Layout.V3, 4, OrcType.REGS_PARTIAL)])
def test_types_by_layout(layout, type_bits, expected):
    kind, signal, end, raw = orc.decode_flags(flags(OrcReg.SP, 0, type_bits, layout), layout)
    assert (kind, raw) == (expected, type_bits)


def test_end_and_signal_bits_move_between_layouts():
    assert orc.decode_flags(0x0400, Layout.V1)[:3] == (OrcType.END_OF_STACK, False, True)
    assert orc.decode_flags(0x0000, Layout.V1)[0] is OrcType.UNDEFINED
    assert orc.decode_flags(0x0800, Layout.V2)[:3] == (OrcType.END_OF_STACK, False, True)
    assert orc.decode_flags(0x0405, Layout.V2)[:3] == (OrcType.CALL, True, False)
    assert orc.decode_flags(0x0B05, Layout.V3)[:3] == (OrcType.REGS, True, False)
    kind, _, _, raw = orc.decode_flags(0x0705, Layout.V3)
    assert kind is OrcType.UNDEFINED and raw < 0          # type 7: no layout defines it


def test_layout_by_header_version_and_bits():
    v3_header = bytes.fromhex("fe5d32bf581bd63b2ca9a5c65ba5a625eab3fe24")
    assert orc.choose_layout(v3_header, None, [])[:2] == (Layout.V3, LayoutFoundBy.HEADER)
    with pytest.raises(DecodeError):
        orc.choose_layout(b"\0" * 20, None, [])
    text = b"\0\0Linux version 6.1.0-50-amd64 (debian-kernel@lists.debian.org) #1 SMP"
    release = orc.find_version_string(text)
    assert release == "6.1.0-50-amd64"
    assert orc.choose_layout(None, release, [0x0105])[:2] == (Layout.V1, LayoutFoundBy.KERNEL_VERSION)
    assert orc.layout_from_version("6.3.9") is Layout.V2
    assert orc.layout_from_version("6.12.107+deb12-amd64") is Layout.V3
    assert orc.layout_from_version("4.13.0") is None
    assert orc.choose_layout(None, None, [0x0205, 0x0305])[:2] == (Layout.V3, LayoutFoundBy.ENTRY_BITS)
    assert orc.choose_layout(None, None, [0x0005, 0x0800])[0] is Layout.V2
    assert orc.choose_layout(None, None, [0x0005, 0x0400, 0x0105])[0] is Layout.V1
    layout, _, notes = orc.choose_layout(None, "6.1.0", [0x0305])     # bits say V3, version V1
    assert layout is Layout.V1 and notes


def test_relative_ips_and_binary_search():
    rows = [(0x1000, 8, 0, 0x205), (0x1004, 16, -16, 0x215), (0x1010, 8, 0, 0x205), (0x2000, 0, 0, 0)]
    tab, ip_bytes, entry_bytes = table(rows, Layout.V3)
    assert [tab.ip(i) for i in range(4)] == [0x1000, 0x1004, 0x1010, 0x2000]
    assert tab.find(0xfff) is None and tab.find(0x1000) == 0 and tab.find(0x100f) == 1
    assert tab.find(0x1010) == 2 and tab.find(0x9999) == 3
    decoded = list(orc.decode_all(ip_bytes, entry_bytes, 0x10000, Layout.V3))
    assert [e.ip for e in decoded] == [0x1000, 0x1004, 0x1010, 0x2000]
    assert decoded[1] == tab.entry(1)
    assert orc.entry_text(decoded[1]) == "cfa=sp+16 bp=[cfa-16] call"
    with pytest.raises(DecodeError):
        orc.check_sizes(8, 6)


def memory(words):
    return word_reader(lambda address, size: struct.pack("<Q", words[address]))


def entry(sp_reg, sp_offset, bp_reg, bp_offset, type_bits, layout=Layout.V3):
    raw = struct.pack("<hhH", sp_offset, bp_offset, flags(sp_reg, bp_reg, type_bits, layout))
    return orc.decode_entry(0, 0x1000, raw, layout)


def test_call_frame_after_push_rbp():
    # push %rbp at function entry: cfa = sp+16, return address at cfa-8, bp saved at cfa-16
    sp = 0x7000
    step_ = apply(entry(OrcReg.SP, 16, OrcReg.PREV_SP, -16, 2), Frame(0x1001, sp, 0x1234),
                  memory({sp: 0xAAAA, sp + 8: 0x4444}))
    assert step_.outcome is Outcome.CALLER and step_.cfa == sp + 16
    assert (step_.caller.pc, step_.caller.sp, step_.caller.bp, step_.caller.exact) == (0x4444, sp + 16, 0xAAAA, False)


def test_bp_based_and_indirect_cfas():
    bp = 0x8000
    s = apply(entry(OrcReg.BP, 16, OrcReg.PREV_SP, -16, 2), Frame(1, 0x7000, bp), memory({bp + 8: 5, bp: 0x9000}))
    assert (s.cfa, s.caller.pc, s.caller.bp) == (bp + 16, 5, 0x9000)
    # SP_INDIRECT (v5.12 on): the word at sp, plus the offset (an IRQ stack's saved pointer)
    s = apply(entry(OrcReg.SP_INDIRECT, 8, OrcReg.UNDEFINED, 0, 2), Frame(1, 0x7000, 3),
              memory({0x7000: 0x9100, 0x9100: 77}))
    assert (s.cfa, s.caller.pc, s.caller.sp, s.caller.bp) == (0x9108, 77, 0x9108, 3)
    s = apply(entry(OrcReg.SP_INDIRECT, 8, OrcReg.UNDEFINED, 0, 2), Frame(1, 0x7000, 3),
              memory({0x7008: 0x9100, 0x90f8: 78}), sp_indirect_v5_12=False)
    assert (s.cfa, s.caller.pc) == (0x9100, 78)
    # BP_INDIRECT: the word at bp + offset (a realigned stack)
    s = apply(entry(OrcReg.BP_INDIRECT, -8, OrcReg.BP, 0, 2), Frame(1, 0x7000, bp),
              memory({bp - 8: 0x9200, 0x91f8: 79, bp: 0x5555}))
    assert (s.cfa, s.caller.pc, s.caller.bp) == (0x9200, 79, 0x5555)
    s = apply(entry(OrcReg.R10, 0, OrcReg.UNDEFINED, 0, 2), Frame(1, 0x7000, bp), memory({}))
    assert s.outcome is Outcome.UNKNOWN_REGISTER
    s = apply(entry(OrcReg.R10, 8, OrcReg.UNDEFINED, 0, 2), Frame(1, 0x7000, bp, others={"r10": 0x6000}),
              memory({0x6000: 80}))
    assert (s.cfa, s.caller.pc) == (0x6008, 80)


def test_regs_and_iret_frames():
    sp = 0x7000
    words = {sp + offset: 0x100 + offset for offset in PT_REGS.values()}
    words[sp + PT_REGS["cs"]] = 0x10
    s = apply(entry(OrcReg.SP, 0, OrcReg.UNDEFINED, 0, 3), Frame(1, sp, 9), memory(words))
    assert s.outcome is Outcome.INTERRUPTED and s.regs_address == sp
    assert (s.caller.pc, s.caller.sp, s.caller.bp, s.caller.exact) == (
        0x100 + PT_REGS["ip"], 0x100 + PT_REGS["sp"], 0x100 + PT_REGS["bp"], True)
    words[sp + PT_REGS["cs"]] = 0x33
    assert apply(entry(OrcReg.SP, 0, OrcReg.UNDEFINED, 0, 3), Frame(1, sp, 9), memory(words)).outcome \
        is Outcome.USER_MODE
    iret = {sp + 8: 0x4000, sp + 16: 0x10, sp + 24: 0x246, sp + 32: 0x7777, sp + 40: 0x18}
    s = apply(entry(OrcReg.SP, 8, OrcReg.UNDEFINED, 0, 4), Frame(1, sp, 9), memory(iret))
    assert (s.outcome, s.caller.pc, s.caller.sp, s.caller.bp, s.caller.exact) == (
        Outcome.INTERRUPTED, 0x4000, 0x7777, 9, True)
    assert s.regs_address == sp + 8 - PT_REGS["ip"]


def test_end_undefined_missing_and_unreadable():
    rows = [(0x1000, 0, 0, flags(0, 0, 1, Layout.V3)), (0x1010, 0, 0, 0), (0x1020, 8, 0, 0x205)]
    tab, _, _ = table(rows, Layout.V3)
    read = memory({})
    assert step(tab, Frame(0x1005, 0x7000, 0), read).outcome is Outcome.END_OF_STACK
    assert step(tab, Frame(0x1015, 0x7000, 0), read).outcome is Outcome.UNDEFINED
    assert step(tab, Frame(0xfff, 0x7000, 0), read).outcome is Outcome.NO_ENTRY
    assert step(tab, Frame(0x1025, 0x7000, 0), read).outcome is Outcome.UNREADABLE
    # a return address's frame looks up pc - 1: 0x1020 belongs to the row before
    assert step(tab, Frame(0x1020, 0x7000, 0, exact=False), read).entry.ip == 0x1010


def test_find_over_many_pages_equals_bisect_and_repeats_read_nothing():
    """A table of 5000 ips (five pages, starting mid-page): find(pc) is Python's bisect over the ips
    (the last ip <= pc), for pcs at, between, below and above them; asked again, it reads no memory."""
    import bisect
    import random
    rng = random.Random(35)
    ips = sorted(rng.sample(range(0x1000, 0x1000 + 400000), 5000))
    rows = [(ip, 8, 0, flags(OrcReg.SP, OrcReg.UNDEFINED, 0, Layout.V3)) for ip in ips]
    orc_table, _, _ = table(rows, Layout.V3, ip_address=0x100a3c, entries_address=0x200000)
    pcs = [0, ips[0] - 1, ips[-1], ips[-1] + 99] + ips[::97] + [rng.randrange(0, 0x70000) for _ in range(300)]
    for pc in pcs:
        expected = bisect.bisect_right(ips, pc) - 1
        assert orc_table.find(pc) == (expected if expected >= 0 else None), hex(pc)
    orc_table._read = None      # a memory read now raises
    assert [orc_table.find(pc) for pc in pcs[:20]] == [bisect.bisect_right(ips, pc) - 1 if pc >= ips[0] else None
                                                       for pc in pcs[:20]]


def test_a_plain_call_entrys_row_gives_what_the_orc_rules_give():
    """plain_row (what the GDB unwinder's per-pc plans replay) against orc_rules.apply: the same CFA,
    caller pc, sp and bp, by the engine's evaluator and by the plans' FastRow; entries that are no
    plain row (pt_regs, the end of the stack, an exception's CALL, bp from an unplanned base) give none.
    The indirect CFAs (SP_INDIRECT: the IRQ stack's top holds the task stack's sp) are plain rows too."""
    from plugin.arch.x86_64 import ARCH
    from plugin.plans import compile_row, evaluate_fast
    from plugin.strategies.evaluate import evaluate_row
    from plugin.strategies.orc import plain_row
    sp, bp = 0x7000, 0x8000
    words = {address: 0x100000 + address for address in range(0x6f00, 0x8100, 8)}
    words[sp], words[bp + 0x20] = 0x7f00, 0x7e00        # another stack's sp, for the indirect CFAs
    read = lambda address, size: b"".join(struct.pack("<Q", words[a]) for a in range(address, address + size, 8))  # noqa: E731
    registers = {ARCH.pc: 0x1001, ARCH.sp: sp, ARCH.fp: bp, 3: 0x33}      # rbx: kept
    for sp_reg, sp_offset, bp_reg, bp_offset in [(OrcReg.SP, 8, OrcReg.UNDEFINED, 0), (OrcReg.SP, 16, OrcReg.PREV_SP, -16),
                                                 (OrcReg.BP, 16, OrcReg.PREV_SP, -16), (OrcReg.SP, 0x48, OrcReg.UNDEFINED, 0),
                                                 (OrcReg.SP_INDIRECT, 16, OrcReg.UNDEFINED, 0),
                                                 (OrcReg.SP_INDIRECT, 24, OrcReg.PREV_SP, -24),
                                                 (OrcReg.BP_INDIRECT, 0x20, OrcReg.UNDEFINED, 0)]:
        e = entry(sp_reg, sp_offset, bp_reg, bp_offset, 2)
        truth = apply(e, Frame(0x1001, sp, bp, exact=False), word_reader(read))
        assert truth.outcome is Outcome.CALLER
        row = plain_row(e, 0x1010, ARCH)
        result = evaluate_row(row, ARCH, registers, read)
        cfa, fast = evaluate_fast(compile_row(row, ARCH), ARCH, registers, read)
        assert result.cfa == cfa == truth.cfa, (e, result.cfa, truth.cfa)
        for caller in (result.registers, fast):
            assert (caller[ARCH.pc], caller[ARCH.sp], caller[ARCH.fp], caller[3]) == \
                (truth.caller.pc, truth.caller.sp, truth.caller.bp, 0x33), e
    for sp_reg, bp_reg, type_bits in [(OrcReg.SP, OrcReg.UNDEFINED, 1), (OrcReg.SP_INDIRECT, OrcReg.BP, 2),
                                      (OrcReg.BP_INDIRECT, OrcReg.BP, 2), (OrcReg.SP, OrcReg.BP, 2),
                                      (OrcReg.R10, OrcReg.UNDEFINED, 2), (OrcReg.SP, OrcReg.UNDEFINED, 3)]:
        assert plain_row(entry(sp_reg, 8, bp_reg, 0, type_bits), None, ARCH) is None, (sp_reg, bp_reg, type_bits)
    assert plain_row(entry(OrcReg.UNDEFINED, 0, OrcReg.UNDEFINED, 0, 0), None, ARCH) is None


def test_a_pt_regs_is_read_in_one_piece_and_an_unreadable_word_is_named():
    """word_reader's pt_regs in one read gives the words read one by one; where one word cannot be
    read (the target's MemoryReadError), the step says which, with no exception."""
    from plugin.errors import MemoryReadError
    sp = 0x7000
    words = {sp + offset: 0x100 + offset for offset in PT_REGS.values()}
    words[sp + PT_REGS["cs"]] = 0x10
    reads = []

    def read(address, size):
        reads.append(size)
        if any(a not in words for a in range(address, address + size, 8)):
            raise MemoryReadError(address, size)
        return b"".join(struct.pack("<Q", words[a]) for a in range(address, address + size, 8))
    regs = entry(OrcReg.SP, 0, OrcReg.UNDEFINED, 0, 3)
    whole = apply(regs, Frame(1, sp, 9), word_reader(read))
    assert reads == [8 * len(PT_REGS)]
    assert whole == apply(regs, Frame(1, sp, 9), memory(words))     # word by word
    del words[sp + PT_REGS["flags"]]
    s = apply(regs, Frame(1, sp, 9), word_reader(read))
    assert s.outcome is Outcome.UNREADABLE and s.reason == "cannot read pt_regs.flags at 0x%x" % (sp + PT_REGS["flags"])
