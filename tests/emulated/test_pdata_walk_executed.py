"""A walk by the `pdata` source alone (plugin.engine.unwind, sources ("pdata",)) from a stop deep
in a call chain equals the chain, x64 and ARM64: tests/fixtures/pe/x64_live.c's DLL runs in
Unicorn from pe_entry until pe_big is about to call its callback; every call executed on the
way is recorded (its return address and the stack pointer it leaves at return). The snapshot
of memory and registers there is walked as a debugger's would be (the module found from the
DLL's headers in memory); each frame's pc and sp must equal the recorded chain, innermost
first, down to the host's return address, and the non-volatile registers recovered for the
host's frame must equal the values it called with."""
from __future__ import annotations

import struct

import capstone
import pytest
import unicorn
from unicorn import arm64_const as arm
from unicorn import x86_const as x86

from pe_images import build, nm_symbols

from plugin.arch import by_name
from plugin.engine import unwind
from plugin.formats import pe
from plugin.target import Mapping, ModuleRef, SnapshotTarget

STACK_BASE, STACK_SIZE = 0x7000000, 0x100000
HOST = 0x5000000            # the "host" code the DLL returns to: an executable mapping, no module
TARGETS = {"x86_64": "x86_64-pc-windows-msvc", "aarch64": "aarch64-pc-windows-msvc"}
NONVOLATILE = {"x86_64": ["rbx", "rbp", "rsi", "rdi", "r12", "r13", "r14", "r15"],
               "aarch64": ["x%d" % n for n in range(19, 30)]}


def _uc_register(arch, name):
    module, prefix = (x86, "UC_X86_REG_") if arch == "x86_64" else (arm, "UC_ARM64_REG_")
    return getattr(module, prefix + {"x29": "FP", "x30": "LR"}.get(name, name.upper()))


@pytest.mark.parametrize("arch_name", sorted(TARGETS))
def test_walk_from_a_deep_stop_equals_the_chain(tmp_path, arch_name):
    path = build("x64_live.c", str(tmp_path), target=TARGETS[arch_name], dll=True)
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    base, size = headers.image_base, (headers.size_of_image + 0xFFF) & ~0xFFF
    x64 = arch_name == "x86_64"
    uc = unicorn.Uc(unicorn.UC_ARCH_X86 if x64 else unicorn.UC_ARCH_ARM64,
                    unicorn.UC_MODE_64 if x64 else unicorn.UC_MODE_ARM)
    uc.mem_map(base, size)
    uc.mem_write(base, data[:0x400])
    for s in headers.sections:
        uc.mem_write(base + s.virtual_address, data[s.raw_offset:s.raw_offset + min(s.raw_size, max(s.virtual_size, 1))])
    uc.mem_map(STACK_BASE, STACK_SIZE)
    uc.mem_map(HOST, 0x1000)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64) if x64 else \
        capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    symbols = nm_symbols(path)
    pe_big = symbols["pe_big"]
    code = bytes(uc.mem_read(pe_big, symbols["pe_saves"] - pe_big))
    stop = next(i.address for i in md.disasm(code, pe_big)     # the indirect call of the callback
                if i.mnemonic == "blr" or i.mnemonic == "call" and not i.op_str.startswith("0x"))
    sp_name, pc_name = ("rsp", "rip") if x64 else ("sp", "pc")
    sp = STACK_BASE + STACK_SIZE - 0x1000
    truth = {name: 0x1000 + 0x11 * n for n, name in enumerate(NONVOLATILE[arch_name])}
    for name, value in truth.items():
        uc.reg_write(_uc_register(arch_name, name), value)
    return_address = HOST + 0x10
    if x64:
        sp -= 8
        uc.mem_write(sp, struct.pack("<Q", return_address))
        uc.reg_write(x86.UC_X86_REG_RCX, HOST)             # the callback (never called: the stop comes first)
        uc.reg_write(x86.UC_X86_REG_RDX, 5)
    else:
        uc.reg_write(arm.UC_ARM64_REG_LR, return_address)
        uc.reg_write(arm.UC_ARM64_REG_X0, HOST)
        uc.reg_write(arm.UC_ARM64_REG_X1, 5)
    uc.reg_write(_uc_register(arch_name, sp_name), sp)
    calls = []          # (return address, sp at return) of each call not yet returned, outermost first
    chain = [(return_address, sp + 8 if x64 else sp)]

    def hook(uc_, address, length, _):
        insn = next(md.disasm(bytes(uc.mem_read(address, length)), address), None)
        if address == stop:
            uc.emu_stop()
        elif insn is not None and insn.mnemonic in ("call", "bl", "blr"):
            here = uc.reg_read(_uc_register(arch_name, sp_name))
            chain.append((address + length, here))
        elif insn is not None and insn.mnemonic == "ret" and len(chain) > 1:
            chain.pop()
    uc.hook_add(unicorn.UC_HOOK_CODE, hook)
    uc.emu_start(symbols["pe_entry"], return_address, count=100000)
    assert uc.reg_read(_uc_register(arch_name, pc_name)) == stop
    # __chkstk's call and return were recorded and popped; what is left is the chain.
    arch = by_name(arch_name)
    registers = {}
    for number, name in arch.registers.items():
        if name in NONVOLATILE[arch_name] + [sp_name, pc_name] + (["x30"] if not x64 else []) or \
                (x64 and name in ("rax", "rcx", "rdx", "r8", "r9", "r10", "r11")):
            registers[number] = uc.reg_read(_uc_register(arch_name, name))
    target = SnapshotTarget(arch, regions=[(base, bytes(uc.mem_read(base, size))),
                                           (STACK_BASE, bytes(uc.mem_read(STACK_BASE, STACK_SIZE))),
                                           (HOST, bytes(0x1000))],
                            module_refs=[ModuleRef("x64_live.dll", base, None)],
                            mapping_list=[Mapping(HOST, HOST + 0x1000, executable=True, name="host"),
                                          Mapping(STACK_BASE, STACK_BASE + STACK_SIZE, writable=True, name="[stack]"),
                                          Mapping(base, base + size, executable=True, name="x64_live.dll")],
                            registers=registers)
    walk = unwind(target, registers, sources=("pdata",), symbolize=False)
    got = [(f.pc, f.registers.get(arch.sp)) for f in walk.frames]
    expected = [(stop, uc.reg_read(_uc_register(arch_name, sp_name)))] + list(reversed(chain))
    assert len(expected) == 5           # pe_big, pe_saves, pe_frame, pe_entry, the host
    assert got == expected, (walk.stop_reason, walk.stop_detail)
    assert [f.method for f in walk.frames[1:]] == ["pdata"] * (len(expected) - 1)
    host = walk.frames[-1].registers
    assert {name: host.get(arch.number_of(name)) for name in NONVOLATILE[arch_name]} == truth
