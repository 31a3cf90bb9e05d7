"""One table of return instructions per architecture, used by both sources
that apply the ABI's rule at a return (plugin/arch/: `returns`, `return_at`,
`entry_row`): the `compact` source and the `frame-pointer` source.

Before the tables were merged, `compact` knew only `ret`/`ret imm16` (x86)
and `ret` (arm64), and `frame-pointer` knew `rep ret`, `retaa` and `retab`
as well. Each case puts the instruction at an exact pc, the return address
where the ABI says it is at a return (x86: at [sp]; aarch64: in x30), and
asks each source for the caller. The encodings are the architecture
manuals': x86 C3, C2 iw, F3 C3; A64 RET = D65F03C0, RETAA = D65F0BFF,
RETAB = D65F0FFF (little-endian in memory).
"""

from types import SimpleNamespace

import pytest

from plugin.cache import BoundedCache
from plugin.target import Target
from plugin.arch import FrameEdge, aarch64, i386, reader, x86_64
from plugin.model.evidence import Frame
from plugin.model.rules import CfaRule, Row, Rule, RuleKind
from plugin.model.outcome import AttemptStatus
from plugin.strategies import compact as compact_strategy
from plugin.strategies import frame_pointer

PC = 0x401000
SP = 0x7FFF0000
CALLER = 0x402345

CASES = [
    (x86_64.ARCH, "ret", b"\xc3"),
    (x86_64.ARCH, "ret imm16", b"\xc2\x10\x00"),
    (x86_64.ARCH, "rep ret", b"\xf3\xc3"),
    (i386.ARCH, "rep ret", b"\xf3\xc3"),
    (aarch64.ARCH, "ret", bytes.fromhex("c0035fd6")),
    (aarch64.ARCH, "retaa", bytes.fromhex("ff0b5fd6")),
    (aarch64.ARCH, "retab", bytes.fromhex("ff0f5fd6")),
]


def _id(value):
    return value.hex() if isinstance(value, bytes) else getattr(value, "name", value)


def _memory(arch, code):
    """read_memory over the code at PC (padded with a non-return byte) and the stack at SP."""
    blocks = {PC: code + b"\x90" * 8, SP: CALLER.to_bytes(arch.address_size, arch.byteorder) + bytes(8)}

    def read_memory(address, size):
        for start, data in blocks.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise OSError("unreadable 0x%x" % address)
    return read_memory


def _frame(arch):
    registers = {arch.pc: PC, arch.sp: SP, arch.fp: 0x1000}
    if arch is aarch64.ARCH:
        registers[arch.ra] = CALLER          # the return address is still in x30
    return Frame(level=0, pc=PC, registers=registers, method="context", exact_pc=True)


def _ctx(arch, code, module):
    return SimpleNamespace(
        arch=arch, target=Target(), read_memory=_memory(arch, code),
        signal_trampolines=BoundedCache("signal trampolines", 64),
        lookup_pc=lambda frame: frame.pc,
        symbol=lambda address: None,
        is_code=lambda address: address == PC,     # the code at pc (the caller is not checked here)
        modules=SimpleNamespace(find=lambda address: module))


def _compact_module(arch, code_start):
    """A Mach-O module whose one compact entry (frameless, 8 bytes) covers the function from code_start."""
    entry = SimpleNamespace(function_start=code_start, function_end=code_start + 0x100, encoding=0x02010000,
                            page_index=0, entry_index=0)
    decoded = SimpleNamespace(mode="STACK_IMMD", text="frameless, stack size 8", function_start=True)

    def row(entry, read_code):
        return Row(address=code_start, cfa=CfaRule("register", register=arch.sp, offset=8),
                   registers={arch.ra: Rule(RuleKind.OFFSET, offset=-8)})
    ui = SimpleNamespace(lookup=lambda pc: entry, decode=lambda e: decoded, row=row,
                         region=SimpleNamespace(address=0x100000))
    module = SimpleNamespace(name="synthetic", format="macho", cache={})
    tables = compact_strategy.CompactTables(module, None)
    tables.unwind_info = lambda: ui
    module.cache[compact_strategy.SOURCE] = tables
    return module


def _expected_cfa(arch):
    return SP + arch.address_size if arch.name != "aarch64" else SP


@pytest.mark.parametrize("arch,mnemonic,code", CASES, ids=_id)
def test_the_arch_table_knows_the_return(arch, mnemonic, code):
    read = reader(_memory(arch, code))
    assert arch.return_at(read, PC) == mnemonic
    assert arch.return_at(read, PC + len(code)) is None          # the padding after it is no return


@pytest.mark.parametrize("arch,mnemonic,code", CASES, ids=_id)
def test_compact_applies_the_abi_rule_at_every_return(arch, mnemonic, code):
    # the function starts before PC: only the return can make the ABI rule apply
    ctx = _ctx(arch, code, _compact_module(arch, PC - 0x40))
    outcome = compact_strategy.step(_frame(arch), ctx)
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.evidence.found_by == "__unwind_info compact unwind, ABI rule at return"
    assert outcome.registers[arch.pc] == CALLER
    assert outcome.evidence.cfa == _expected_cfa(arch)


@pytest.mark.parametrize("arch,mnemonic,code", CASES, ids=_id)
def test_frame_pointer_applies_the_abi_rule_at_every_return(arch, mnemonic, code):
    ctx = _ctx(arch, code, None)
    outcome = frame_pointer.step(_frame(arch), ctx)
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.evidence.entry["kind"] == FrameEdge.AT_RETURN == "function exit"
    assert outcome.registers[arch.pc] == CALLER
    assert outcome.evidence.cfa == _expected_cfa(arch)
    assert outcome.registers[arch.fp] == 0x1000           # a return leaves the frame pointer as it is


def test_a_return_elsewhere_is_not_taken():
    """A `rep` prefix before another instruction is no return; nor is `ret x1` on aarch64."""
    rep_movsb = b"\xf3\xa4"
    ret_x1 = bytes.fromhex("20005fd6")
    for arch, code in ((x86_64.ARCH, rep_movsb), (aarch64.ARCH, ret_x1)):
        assert arch.return_at(reader(_memory(arch, code)), PC) is None
        ctx = _ctx(arch, code, _compact_module(arch, PC - 0x40))
        outcome = compact_strategy.step(_frame(arch), ctx)
        assert "ABI rule" not in (outcome.evidence.found_by if outcome.evidence else "")


def test_arm_call_before_knows_both_instruction_sets():
    """Each encoding as capstone reads it, then ArmArch.call_before on the return address after it
    (a Thumb return address with and without its bit 0)."""
    import capstone
    from plugin.arch import arm
    cases = [(capstone.CS_MODE_THUMB, "fff7b3ff", "bl"), (capstone.CS_MODE_THUMB, "00bf9847", "blx rm"),
             (capstone.CS_MODE_ARM, "020000eb", "bl"), (capstone.CS_MODE_ARM, "010000fa", "blx"),
             (capstone.CS_MODE_ARM, "33ff2fe1", "blx rm"), (capstone.CS_MODE_ARM, "0000a0e1", None),
             (capstone.CS_MODE_THUMB, "00bf7047", None)]
    for mode, code, expected in cases:
        raw = bytes.fromhex(code)
        last = list(capstone.Cs(capstone.CS_ARCH_ARM, mode).disasm_lite(raw, 0x1000))[-1]
        assert last[2].startswith(("bl", "blx")) == (expected is not None), (code, last)
        read = lambda address, size: raw[address - 0x1000:address - 0x1000 + size]
        for ra in ((0x1004, 0x1005) if mode == capstone.CS_MODE_THUMB else (0x1004,)):
            assert arm.ARCH.call_before(read, ra) == expected, (code, hex(ra))


def test_arm_direct_call_target_is_capstones():
    """The target of each `bl`/`blx #imm` (both sets, both directions, forwards and backwards) as
    capstone reads it (an address, bit 0 clear, as symbols' starts are compared); none for `blx rm`."""
    import capstone
    from plugin.arch import arm
    thumb, arm_mode = capstone.CS_MODE_THUMB, capstone.CS_MODE_ARM
    cases = [(thumb, "fff7b3ff", True), (thumb, "00f002f8", True), (thumb, "fff7aeef", False),
             (thumb, "00f004e8", False), (thumb, "00bf9847", None), (arm_mode, "020000eb", False),
             (arm_mode, "fcffffeb", False), (arm_mode, "010000fa", True), (arm_mode, "010000fb", True),
             (arm_mode, "33ff2fe1", None)]
    for base in (0x1000, 0x1002):
        for mode, code, to_thumb in cases:
            if mode == arm_mode and base & 3:
                continue
            raw = bytes.fromhex(code)
            last = list(capstone.Cs(capstone.CS_ARCH_ARM, mode).disasm(raw, base))[-1]
            read = lambda address, size: raw[address - base:address - base + size]
            ra = base + len(raw) + (1 if mode == thumb else 0)
            target = arm.ARCH.direct_call_target(read, ra)
            if to_thumb is None:
                assert target is None, code
                continue
            assert target == int(last.op_str.lstrip("#"), 16), (code, last, hex(target))
