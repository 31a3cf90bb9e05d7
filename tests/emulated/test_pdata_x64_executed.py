"""plugin.formats.pdata_eval.unwind_x64 proven by execution: each function of clang-built
and hand-written x64 PE images runs in Unicorn from its entry to its return; at every
instruction (prologue, body, and epilogues, which the evaluation reads from the code as
Windows does), the caller's rsp, return address and non-volatile registers the evaluation computes equal
the ones the call was made with."""
from __future__ import annotations

import struct

import capstone
import pytest
import unicorn
from unicorn import x86_const as x86

from pe_images import build

from plugin.formats import pdata_eval
from plugin.formats import pdata_x64 as x64
from plugin.formats import pe

STACK_BASE, STACK_SIZE = 0x7000000, 0x400000
SENTINEL = 0xDEAD000
XMM_TRUTH = {n: (0x1234 + n) << 64 | (0x5678 + n) for n in range(6, 16)}   # xmm6-15 (non-volatile)
NONVOLATILE = ("rbx", "rbp", "rsi", "rdi", "r12", "r13", "r14", "r15")
UC = {name: getattr(x86, "UC_X86_REG_" + name.upper()) for name in x64.GPR + ("rip",)}


def _load(path):
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(headers.image_base, (headers.size_of_image + 0xFFF) & ~0xFFF)
    uc.mem_write(headers.image_base, data[:0x400])
    for s in headers.sections:
        uc.mem_write(headers.image_base + s.virtual_address, data[s.raw_offset:s.raw_offset + min(s.raw_size, max(s.virtual_size, 1))])
    uc.mem_map(STACK_BASE, STACK_SIZE)
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    functions = x64.read_runtime_functions(read, headers.exception_rva, headers.exception_size)
    return uc, headers, read, functions


def _epilogue_pcs(uc, base, fn):
    """Addresses of the instructions of fn's epilogues: before each ret, the pops and one
    `add rsp`/`lea rsp` that lead to it."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    code = bytes(uc.mem_read(base + fn.begin, fn.end - fn.begin))
    insns = list(md.disasm(code, base + fn.begin))
    pcs = set()
    for n, insn in enumerate(insns):
        if insn.mnemonic != "ret":
            continue
        pcs.add(insn.address)
        k = n - 1
        while k >= 0 and insns[k].mnemonic == "pop":
            pcs.add(insns[k].address)
            k -= 1
        if k >= 0 and insns[k].mnemonic in ("add", "lea") and insns[k].op_str.startswith("rsp"):
            pcs.add(insns[k].address)
    return pcs


def _root(read, fn):
    infos = x64.chain(read, fn)
    return infos[-2].chained if len(infos) > 1 else fn


def _run_from(path, entry_index):
    uc, headers, read, functions = _load(path)
    base = headers.image_base
    entry = functions[entry_index]
    epilogues = set()
    for fn in functions:
        epilogues |= _epilogue_pcs(uc, base, fn)
    rsp = STACK_BASE + STACK_SIZE - 0x1000
    uc.mem_write(rsp, struct.pack("<Q", SENTINEL))
    truth = {name: 0x1111 * (n + 1) for n, name in enumerate(NONVOLATILE)}
    for name, value in truth.items():
        uc.reg_write(UC[name], value)
    for n, value in XMM_TRUTH.items():
        uc.reg_write(getattr(x86, "UC_X86_REG_XMM%d" % n), value)
    uc.reg_write(UC["rsp"], rsp)
    uc.reg_write(UC["rcx"], 2)
    checked, mismatches, xmm_checked = [], [], []

    def memory(address, size):
        return bytes(uc.mem_read(address, size))

    def hook(uc_, pc, size, _):
        fn = x64.find(functions, pc - base)
        if fn is None or _root(read, fn) != entry:
            return
        regs = {name: uc.reg_read(UC[name]) for name in UC}
        parts = [(base + f.begin, base + f.end) for f in functions if _root(read, f) == entry]
        got = pdata_eval.unwind_x64(fn, x64.chain(read, fn), base, pc, regs, memory, parts)
        xmm = {n: int.from_bytes(bytes(uc.mem_read(address, 16)), "little")
               for n, address in got.xmm_saved_at.items()}
        have = (got.cfa, got.rip, {n: got.registers[n] for n in NONVOLATILE},
                {n: v for n, v in xmm.items() if v != XMM_TRUTH[n]})
        want = (rsp + 8, SENTINEL, truth, {})
        if xmm:
            xmm_checked.append(pc)
        checked.append((pc, pc in epilogues))
        if have != want:
            mismatches.append((hex(pc), have, want))

    uc.hook_add(unicorn.UC_HOOK_CODE, hook)
    uc.emu_start(base + entry.begin, SENTINEL, count=100000)
    assert uc.reg_read(UC["rsp"]) == rsp + 8          # ran to its return
    return checked, mismatches, xmm_checked


def _cases():
    return [("x64_funcs.c", "-O0", n) for n in range(3)] + \
        [("x64_funcs.c", "-O2", n) for n in range(2)] + \
        [("x64_codes.s", "-O0", 0), ("x64_codes.s", "-O0", 1), ("x64_codes.s", "-O0", 2),
         ("x64_chained.s", "-O0", 0)]


@pytest.mark.parametrize("source,opt,index", _cases())
def test_caller_registers_equal_execution(tmp_path, source, opt, index):
    path = build(source, str(tmp_path), opt=opt)
    checked, mismatches, _ = _run_from(path, index)
    assert any(in_epilogue for _, in_epilogue in checked)
    assert any(not in_epilogue for _, in_epilogue in checked)
    assert mismatches == []


def test_chained_fragment_rows_were_checked(tmp_path):
    """The fragment's instructions (reached by jmp) were among those checked."""
    path = build("x64_chained.s", str(tmp_path), opt="-O0")
    _, headers, read, functions = _load(path)
    checked, _, _ = _run_from(path, 0)
    frag = functions[1]
    assert any(headers.image_base + frag.begin <= pc < headers.image_base + frag.end
               for pc, _ in checked)


def test_saved_xmm_registers_are_where_the_codes_say(tmp_path):
    """SAVE_XMM128 (xmm6) and SAVE_XMM128_FAR (xmm7, 1 MiB up the frame): at every instruction
    after the saves, the 16 bytes at the address the evaluation gives are the register's value."""
    path = build("x64_codes.s", str(tmp_path), opt="-O0")
    _, _, read, functions = _load(path)
    ops = {c.op for c in x64.chain(read, functions[0])[0].codes}
    assert {x64.Op.SAVE_XMM128, x64.Op.SAVE_XMM128_FAR} <= ops
    checked, mismatches, xmm_checked = _run_from(path, 0)
    assert mismatches == [] and len(xmm_checked) >= 4


def test_clang_xmm_saves_are_where_the_codes_say(tmp_path):
    """clang -O2's own SAVE_XMM128 codes (xmm6-xmm13 kept across calls in x64_xmm.c's keep),
    executed: at every instruction where the evaluation says a register is saved, the 16 bytes
    there are the caller's value (the rows `validate` judges are made from these addresses)."""
    from pe_images import nm_symbols
    path = build("x64_xmm.c", str(tmp_path), opt="-O2")
    _, headers, read, functions = _load(path)
    [index] = [n for n, f in enumerate(functions) if headers.image_base + f.begin == nm_symbols(path)["keep"]]
    ops = [c for c in x64.chain(read, functions[index])[0].codes if c.op == x64.Op.SAVE_XMM128]
    assert len(ops) >= 4
    checked, mismatches, xmm_checked = _run_from(path, index)
    assert mismatches == [] and len(xmm_checked) >= 20
