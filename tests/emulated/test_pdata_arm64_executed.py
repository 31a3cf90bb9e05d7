"""plugin.formats.pdata_arm64_eval proven by execution: each function of clang-built and
hand-written ARM64 PE images runs in Unicorn from its entry to its return; at every
instruction of it (prologue, body, epilogues), the caller's sp, return address and
x19-x29 the evaluation computes equal those the call was made with."""
from __future__ import annotations

import pytest
import unicorn
from unicorn import arm64_const as arm

from pe_images import build

from plugin.errors import DecodeError
from plugin.formats import pdata_arm64 as a64
from plugin.formats import pdata_arm64_eval as ev
from plugin.formats import pe

ARM64 = "aarch64-pc-windows-msvc"
STACK_BASE, STACK_SIZE = 0x7000000, 0x100000
SENTINEL = 0xDEAD000
CALLEE_SAVED = ["x%d" % n for n in range(19, 30)]
UC = {**{"x%d" % n: getattr(arm, "UC_ARM64_REG_X%d" % n) for n in range(29)},
      "x29": arm.UC_ARM64_REG_FP, "x30": arm.UC_ARM64_REG_LR, "sp": arm.UC_ARM64_REG_SP,
      "pc": arm.UC_ARM64_REG_PC}


def _load(path):
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    uc = unicorn.Uc(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM)
    uc.mem_map(headers.image_base, (headers.size_of_image + 0xFFF) & ~0xFFF)
    for s in headers.sections:
        uc.mem_write(headers.image_base + s.virtual_address,
                     data[s.raw_offset:s.raw_offset + min(s.raw_size, max(s.virtual_size, 1))])
    uc.mem_map(STACK_BASE, STACK_SIZE)
    uc.mem_map(SENTINEL & ~0xFFF, 0x1000)
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    return uc, headers, read, a64.read_entries(read, headers.exception_rva, headers.exception_size)


def _find(entries, read, rva):
    for e in entries:
        length = e.packed.function_length if e.packed else a64.read_xdata(read, e.xdata).function_length
        if e.begin <= rva < e.begin + length:
            return e
    return None


def _run(path, index):
    uc, headers, read, entries = _load(path)
    base = headers.image_base
    entry = entries[index]
    sp = STACK_BASE + STACK_SIZE - 0x1000
    truth = {name: 0x1000 + n for n, name in enumerate(CALLEE_SAVED)}
    for name, value in truth.items():
        uc.reg_write(UC[name], value)
    uc.reg_write(UC["sp"], sp)
    uc.reg_write(UC["x30"], SENTINEL)
    uc.reg_write(UC["x0"], 2)
    checked, mismatches = [], []

    def hook(uc_, pc, size, _):
        e = _find(entries, read, pc - base)
        if e is not entry:
            return
        regs = {name: uc.reg_read(UC[name]) for name in UC}
        xdata = a64.read_xdata(read, e.xdata) if e.xdata is not None else None
        got = ev.unwind_arm64(e, xdata, base, pc, regs,
                              lambda a, n: bytes(uc.mem_read(a, n)))
        have = (got.cfa, got.pc, {n: got.registers[n] for n in CALLEE_SAVED})
        checked.append(pc)
        if have != (sp, SENTINEL, truth):
            mismatches.append((hex(pc), have))

    uc.hook_add(unicorn.UC_HOOK_CODE, hook)
    uc.emu_start(base + entry.begin, SENTINEL, count=100000)
    assert uc.reg_read(UC["sp"]) == sp
    return checked, mismatches


CASES = [("x64_funcs.c", "-O0", n) for n in range(4)] + \
    [("x64_funcs.c", "-O2", n) for n in range(2)] + [("arm64_codes.s", "-O0", 0)] + \
    [("arm64_packed.c", "-O0", n) for n in range(6)] + \
    [("arm64_packed.c", "-O2", n) for n in range(4)]


@pytest.mark.parametrize("source,opt,index", CASES)
def test_caller_registers_equal_execution_at_every_instruction(tmp_path, source, opt, index):
    path = build(source, str(tmp_path), target=ARM64, opt=opt)
    try:
        checked, mismatches = _run(path, index)
    except DecodeError as exc:
        pytest.fail("not evaluated: %s" % exc)
    assert len(checked) >= 3
    assert mismatches == []
