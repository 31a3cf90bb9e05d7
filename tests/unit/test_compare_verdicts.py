"""`unwind compare`'s verdicts rest only on bytes that were read (issue 19 item 5)."""

from types import SimpleNamespace

from plugin import arch as arches
from plugin.cache import BoundedCache
from plugin.target import Target
from plugin.errors import MemoryReadError
from plugin.validate.compare import _judge

X86 = arches.by_name("x86_64")
CALL_SITE = 0x1005          # after `call rel32` at 0x1000
NOT_AFTER_CALL = 0x2010
UNREADABLE = 0x3010         # executable by the mappings, but its bytes cannot be read


def context():
    code = {0xff0: b"\x90" * 0x10 + b"\xe8\x00\x00\x00\x00", 0x2000: b"\x90" * 0x20}

    def read_memory(address, size):
        for start, data in code.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise MemoryReadError(address, size, "not in the core")
    return SimpleNamespace(arch=X86, read_memory=read_memory, is_code=lambda pc: True, target=Target(),
                           signal_trampolines=BoundedCache("signal trampolines", 64))


def test_a_side_is_called_right_only_from_bytes_read():
    assert _judge(CALL_SITE, NOT_AFTER_CALL, 2, context()).startswith("plugin looks right")
    assert _judge(NOT_AFTER_CALL, CALL_SITE, 2, context()).startswith("debugger looks right")


def test_unreadable_code_gives_unknown_not_a_verdict():
    verdict = _judge(CALL_SITE, UNREADABLE, 2, context())
    assert verdict.startswith("unknown"), verdict
    assert "0x%x" % UNREADABLE in verdict and "looks right" not in verdict


def _frame(level, pc, sp):
    return SimpleNamespace(level=level, pc=pc, registers={X86.sp: sp}, function=None, method="cfi")


def test_a_frame_only_one_side_has_is_its_own_row_and_the_rest_are_compared_with_their_equal():
    from plugin.validate.compare import compare

    ours = [_frame(0, 0x1000, 0x100), _frame(1, CALL_SITE, 0x110), _frame(2, 0x1100, 0x120)]
    # The debugger has one frame more between #0 and #1 (it read a word of argv as a return address).
    theirs = [{"pc": 0x1000, "sp": 0x100}, {"pc": 0x7fff0000, "sp": 0x108},
              {"pc": CALL_SITE, "sp": 0x110}, {"pc": 0x1100, "sp": 0x120}, {"pc": 0, "sp": 0x130}]
    rows = compare(ours, theirs, context())
    assert [(r["plugin"] and r["plugin"]["pc"], r["native"] and r["native"]["pc"], r["agrees"]) for r in rows] == [
        (0x1000, 0x1000, True), (None, 0x7fff0000, False), (CALL_SITE, CALL_SITE, True), (0x1100, 0x1100, True),
        (None, 0, False)]
    assert rows[1]["verdict"] == "only the debugger has this frame" and rows[1]["level"] == 1
    # The other way round: a frame only the plugin has.
    rows = compare(ours, [theirs[0], theirs[3]], context())
    assert [(r["plugin"] and r["plugin"]["pc"], r["agrees"]) for r in rows] == [
        (0x1000, True), (CALL_SITE, False), (0x1100, True)]
    assert rows[1]["verdict"] == "only the plugin has this frame"
    # Different frames that never meet again stay paired level by level, with a verdict.
    rows = compare(ours, [theirs[0], {"pc": NOT_AFTER_CALL, "sp": 0x110}], context())
    assert [r["agrees"] for r in rows] == [True, False, False]
    assert rows[1]["verdict"].startswith("plugin looks right")
