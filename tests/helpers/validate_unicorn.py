"""`unwind validate`'s live core run in Unicorn: a Mach-O dylib's functions called one at a time.

The emulator is the process: EmulatedProcess is its Target (memory, the
module found from its header, the symbols), UnicornStepper steps it one
instruction (a call: until the instruction after it) for
plugin.validate.stepping.run, exactly as the GDB and LLDB adapters do.
"""

import struct

from compact_support import symbols
from macho_emulator import LOAD_ADDRESS, SENTINEL, STACK_BASE, STACK_SIZE, X86_REGS, load_image

from plugin.engine import STRATEGIES, UnwindContext
from plugin.errors import MemoryReadError
from plugin.modules import ModuleMap
from plugin.target import Mapping, ModuleRef, Target
from plugin.validate import live, stepping

# Callee-saved values the caller "had": distinct, so a register recovered from the wrong slot shows.
CALLER_VALUES = {3: 0x3333000033330000, 6: 0x6666000066660000, 12: 0x1212000012120000,
                 13: 0x1313000013130000, 14: 0x1414000014140000, 15: 0x1515000015150000}


class EmulatedProcess(Target):
    def __init__(self, path):
        self.path = path
        self.uc, self.macho = load_image(path, "x86_64")
        self.arch = self.macho.arch
        slide = self.macho.slide
        self.address_of = {name: address + slide for name, address in symbols(path).items()}
        self._starts = sorted((a, n) for n, a in self.address_of.items())
        self._mappings = [Mapping(s.vmaddr + slide, s.vmaddr + slide + s.vmsize, True, bool(s.initprot & 2),
                                  bool(s.initprot & 4), path.name) for s in self.macho.segments if s.vmsize]
        self._mappings.append(Mapping(STACK_BASE, STACK_BASE + STACK_SIZE, True, True, False, "[stack]"))

    def read_memory(self, address, size):
        if not any(m.start <= address and address + size <= m.end for m in self._mappings):
            raise MemoryReadError(address, size, "not mapped in the emulator")
        return bytes(self.uc.mem_read(address, size))

    def modules(self):
        return [ModuleRef(self.path.name, LOAD_ADDRESS, str(self.path))]

    def mappings(self):
        return list(self._mappings)

    def symbol(self, address):
        best = None
        for start, name in self._starts:
            if start <= address:
                best = (name, start)
        return best

    def registers(self):
        return {n: self.uc.reg_read(r) for n, r in X86_REGS.items()}


class UnicornStepper(stepping.Stepper):
    def __init__(self, process, decode):
        self.process, self.decode = process, decode

    def registers(self):
        return self.process.registers()

    def step(self, over):
        uc, pc = self.process.uc, self.process.registers()[16]
        if over:
            insn = self.decode(pc)
            uc.emu_start(pc, insn.end, count=100000)
        else:
            uc.emu_start(pc, SENTINEL, count=1)     # a return to SENTINEL stops there, unfetched
        return None

    def where(self):
        return "0x%x" % self.registers()[16]


def validate_call(path, function, arguments=(3, 5), sources=("compact", "cfi")):
    """(json, text) of validating one call of `function`, entered from a fresh stack."""
    process = EmulatedProcess(path)
    uc = process.uc
    sp = STACK_BASE + STACK_SIZE - 0x108
    uc.mem_write(sp, struct.pack("<Q", SENTINEL))
    for number, value in CALLER_VALUES.items():
        uc.reg_write(X86_REGS[number], value)
    for number, value in zip((5, 4), arguments):          # rdi, rsi
        uc.reg_write(X86_REGS[number], value)
    uc.reg_write(X86_REGS[7], sp)
    uc.reg_write(X86_REGS[16], process.address_of[function])
    modules = ModuleMap(process)
    decode = stepping.decoder(process.arch, process.read_memory)
    truth = live.truth_at_entry(process.arch, process.registers(), process.read_memory)
    check = live.LiveValidation(lambda s: UnwindContext(process, modules, (s,)), process.arch, sources,
                                STRATEGIES, truth, process.symbol, decode)
    ending, steps, detail = stepping.run(check, UnicornStepper(process, decode), 1000)
    return check.report(function, ending, steps, detail, False, "0x%x" % process.registers()[16])
