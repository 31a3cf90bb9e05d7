"""ARM64 packed .pdata entries beyond CR 0/1 (chained frames CR=3, pacibsp CR=2, saved d
registers RegF, homed parameters H in and after the prologue, LocSZ over 512 and over
4080, lr alone, lr after an even RegI, the x19+lr case) proven two ways on
tests/fixtures/pe/arm64_packed_forms.S:

- by execution: each function runs in Unicorn from its entry to its return; at every
  instruction the caller's sp, return address, x19-x29 and (read from where the
  evaluation says they were saved) d8-d10 equal those the call was made with;
- by llvm-readobj-16: the canonical prologue it prints for each entry is the function's
  first instructions (llvm-objdump-16), so the fixture is what the fields describe;
  except two entries llvm-readobj-16 expands in the way LLVM later corrected (pull
  requests 170294: H=1 with RegI=RegF=0 and CR!=1 homes after the prologue; 169676:
  RegI=1 CR=1 is sub sp,#16; stp x19,lr,[sp]), where it is checked to print its old form.
"""
from __future__ import annotations

import re
import struct
import subprocess

import pytest
import unicorn
from unicorn import arm64_const as arm

from pe_images import build, nm_symbols

from plugin.formats import pdata_arm64 as a64
from plugin.formats import pdata_arm64_eval as ev
from plugin.formats import pe

ARM64 = "aarch64-pc-windows-msvc"
SOURCE = "arm64_packed_forms.S"
STACK_BASE, STACK_SIZE = 0x7000000, 0x100000
SENTINEL = 0xDEAD000
CALLEE_SAVED = ["x%d" % n for n in range(19, 30)]
FLOATS = ("d8", "d9", "d10")
UC = {**{"x%d" % n: getattr(arm, "UC_ARM64_REG_X%d" % n) for n in range(29)},
      "x29": arm.UC_ARM64_REG_FP, "x30": arm.UC_ARM64_REG_LR, "sp": arm.UC_ARM64_REG_SP,
      "pc": arm.UC_ARM64_REG_PC}
FUNCTIONS = ["chained", "chained_pac", "floats", "mixed", "homed", "homed_late", "big_chained",
             "two_steps", "x19_lr", "lr_only", "lr_after_pair"]
READOBJ_16_OLD_FORM = {"homed_late": "stp x0, x1, [sp, #-64]!", "x19_lr": "INVALID!"}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return build(SOURCE, str(tmp_path_factory.mktemp("packed")), target=ARM64, opt="-O0")


def _run(path, name):
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    base = headers.image_base
    uc = unicorn.Uc(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM)
    uc.mem_map(base, (headers.size_of_image + 0xFFF) & ~0xFFF)
    for s in headers.sections:
        uc.mem_write(base + s.virtual_address, data[s.raw_offset:s.raw_offset + min(s.raw_size, max(s.virtual_size, 1))])
    uc.mem_map(STACK_BASE, STACK_SIZE)
    uc.mem_map(SENTINEL & ~0xFFF, 0x1000)
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    entries = a64.read_entries(read, headers.exception_rva, headers.exception_size)
    begin = nm_symbols(path)[name] - base
    entry = next(e for e in entries if e.begin == begin)
    assert entry.flag == a64.PdataFlag.PACKED
    sp = STACK_BASE + STACK_SIZE - 0x1000
    truth = {n: 0x1000 + k for k, n in enumerate(CALLEE_SAVED)}
    floats = {d: 0x4000 + k for k, d in enumerate(FLOATS)}
    for n, value in truth.items():
        uc.reg_write(UC[n], value)
    for d, value in floats.items():
        uc.reg_write(getattr(arm, "UC_ARM64_REG_" + d.upper()), value)
    uc.reg_write(UC["sp"], sp)
    uc.reg_write(UC["x30"], SENTINEL)
    uc.reg_write(UC["x0"], 0x77)
    end = base + begin + entry.packed.function_length
    checked, mismatches = [], []

    def hook(uc_, pc, size, _):
        if not base + begin <= pc < end:
            return
        regs = {n: uc.reg_read(UC[n]) for n in UC}
        got = ev.unwind_arm64(entry, None, base, pc, regs, lambda a, n: bytes(uc.mem_read(a, n)))
        saved_floats = {d: struct.unpack("<Q", bytes(uc.mem_read(got.saved_at[d], 8)))[0]
                        for d in FLOATS if d in got.saved_at}
        have = (got.cfa, got.pc, {n: got.registers[n] for n in CALLEE_SAVED})
        checked.append(pc)
        if have != (sp, SENTINEL, truth) or any(floats[d] != v for d, v in saved_floats.items()):
            mismatches.append((hex(pc), hex(got.cfa), hex(got.pc), saved_floats))

    uc.hook_add(unicorn.UC_HOOK_CODE, hook)
    uc.emu_start(base + begin, SENTINEL, count=10000)
    assert uc.reg_read(UC["sp"]) == sp
    return entry, checked, mismatches


@pytest.mark.parametrize("name", FUNCTIONS)
def test_caller_registers_equal_execution_at_every_instruction(image, name):
    entry, checked, mismatches = _run(image, name)
    assert len(checked) == entry.packed.function_length // 4      # every instruction ran once
    assert mismatches == []


def test_floats_saved_where_the_evaluation_says(image):
    """d8-d10 are read back from the addresses the evaluation gives, in the body of `mixed`."""
    entry, checked, mismatches = _run(image, "mixed")
    assert entry.packed.reg_f == 2 and mismatches == []


def _normal(text):
    text = re.sub(r"#(-?)0x([0-9a-f]+)", lambda m: "#%s%d" % (m.group(1), int(m.group(2), 16)), text.strip())
    text = re.sub(r"\s+", " ", text).replace(", [sp, #0]", ", [sp]").replace("lr", "x30")
    return text


def _readobj_prologues(path):
    out = subprocess.run(["llvm-readobj-16", "--unwind", path], check=True, capture_output=True,
                         text=True).stdout
    prologues, current = {}, None
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("Function:"):
            current = int(re.search(r"0x([0-9A-F]+)", s).group(1), 16)
        elif s.startswith("Prologue ["):
            prologues[current] = []
        elif current in prologues and s not in ("]", "end", "}") and not s.startswith("RuntimeFunction"):
            prologues[current].append(s)
    return prologues


def test_the_fixture_is_the_canonical_form_llvm_readobj_prints(image):
    symbols = nm_symbols(image)
    prologues = _readobj_prologues(image)
    disassembly = subprocess.run(["llvm-objdump-16", "-d", "--no-show-raw-insn", image], check=True,
                                 capture_output=True, text=True).stdout
    code = {}
    for line in disassembly.splitlines():
        match = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if match:
            code[int(match.group(1), 16)] = _normal(match.group(2))
    for name in FUNCTIONS:
        printed = prologues[symbols[name]]
        if name in READOBJ_16_OLD_FORM:
            assert READOBJ_16_OLD_FORM[name] in printed, (name, printed)
            continue
        first = [code[symbols[name] + 4 * k] for k in range(len(printed))]
        assert [_normal(t) for t in reversed(printed)] == first, name
