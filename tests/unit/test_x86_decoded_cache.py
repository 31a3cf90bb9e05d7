"""The per-text decoding cache (plugin.analysis.x86_decoded) gives, at every address, what decoding the
text there from scratch (plugin.analysis.x86.decode_text) gives: for texts whose effects name their
address (a realignment, a compare's pending bound) as for those that do not."""
from __future__ import annotations

import pytest

from plugin.analysis import i386, x86_64
from plugin.analysis.x86 import decode_text

TEXTS = [("cmp", "rax, rbx"), ("cmp", "eax, 0x10"), ("and", "rsp, 0xfffffffffffffff0"), ("and", "rax, rbx"),
         ("pcmpeqb", "xmm0, xmm1"), ("cmpxchg", "qword ptr [rdi], rsi"), ("and", "rsp, 0x123"),
         ("mov", "rbp, rsp"), ("lea", "rax, [rip + 0x10]")]


@pytest.mark.parametrize("mnemonic,op_str", TEXTS)
def test_a_text_decodes_at_each_address_as_from_scratch(mnemonic, op_str):
    for address in (0x401000, 0x402340, 0x401000):
        assert x86_64.decode(address, 4, mnemonic, op_str) == decode_text(x86_64.DIALECT, address, 4, mnemonic, op_str)


def test_i386_realignment_names_each_address():
    first = i386.decode(0x1000, 3, "and", "esp, 0xfffffff0")
    second = i386.decode(0x2000, 3, "and", "esp, 0xfffffff0")
    assert first.effects != second.effects
    assert second == decode_text(i386.DIALECT, 0x2000, 3, "and", "esp, 0xfffffff0")
