"""A function's kept sweep (plugin.analysis.sweeps) reads back as capstone swept it; the sizes a
control-flow sweep records (ByteMap.set_run) are capstone's. The oracle is capstone itself, over
x86_64 code with instructions of one to ten bytes and a byte capstone cannot decode."""
from __future__ import annotations

import capstone

from plugin.analysis.addresses import ByteMap
from plugin.analysis.sweeps import Sweeps

# push rbp; mov rbp, rsp; movabs rax, 0x1122334455667788; lea rcx, [rip + 0x10]; nop; ret; then 0x06
# (not an x86_64 instruction: capstone's sweep ends before it)
CODE = bytes.fromhex("55" "4889e5" "48b88877665544332211" "488d0d10000000" "90" "c3" "06" "90")
START = 0x401000


def _capstone():
    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def _kept(sweeps: Sweeps, start: int, end: int, code: bytes) -> list:
    """What decide_noreturn's sweep keeps: each instruction's size, mnemonic and operands."""
    found = list(_capstone().disasm_lite(code, start))
    sweeps.keep(start, end, bytearray(size for _, size, _, _ in found),
                [text for _, _, mnemonic, op_str in found for text in (mnemonic, op_str)])
    return found


def test_a_kept_sweep_reads_back_as_capstone_gave_it():
    sweeps = Sweeps()
    found = _kept(sweeps, START, START + len(CODE), CODE)
    assert len(found) == 6 and found[3][2] == "lea"       # the sweep stops before the 0x06 byte
    assert list(sweeps.again(START, START + len(CODE), last=False)) == found
    assert list(sweeps.again(START, START + len(CODE), last=True)) == found
    assert sweeps.again(START, START + len(CODE), last=False) is None     # dropped by the last read


def test_a_sweep_of_another_range_is_not_read_back():
    sweeps = Sweeps()
    _kept(sweeps, START, START + len(CODE), CODE)
    assert sweeps.again(START, START + 4, last=False) is None      # same start, another end
    assert sweeps.again(START + 1, START + len(CODE), last=False) is None


def test_set_run_gives_each_instruction_its_size_across_a_page():
    start = 0x401ffa                            # the movabs crosses into the next 4 KiB page
    found = list(_capstone().disasm_lite(CODE, start))
    sizes = ByteMap()
    sizes.set_run(start, bytes(size for _, size, _, _ in found))
    assert [sizes.get(address) for address, _, _, _ in found] == [size for _, size, _, _ in found]
    assert sizes.get(start + 2) == 0 and sizes.get(found[-1][0] + 1) == 0   # inside the mov, past the ret


def test_no_more_is_kept_past_the_limit(monkeypatch):
    from plugin.analysis import sweeps as module
    monkeypatch.setattr(module, "MAX_KEPT", 10)
    sweeps = Sweeps()
    _kept(sweeps, START, START + len(CODE), CODE)                # its sizes and texts: past 10 bytes
    _kept(sweeps, START + 0x100, START + 0x100 + len(CODE), CODE)
    assert sweeps.again(START, START + len(CODE), last=False) is not None
    assert sweeps.again(START + 0x100, START + 0x100 + len(CODE), last=False) is None
