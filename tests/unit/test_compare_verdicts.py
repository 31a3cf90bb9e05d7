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
