"""Unicorn harness for the engine-level compact unwind tests (holds no tests).

Builds tests/fixtures/macho/unwind_engine.c (unwind_shapes.c plus a
DWARF-mode caller) with compact_support.build_macho, maps it at
LOAD_ADDRESS in Unicorn (macho_emulator.load_image), and runs
engine_main(DEPTH) while a code hook keeps a shadow stack of the truth:
for every active call, the function, its return address, the caller's
stack pointer (the CFA) and the caller's callee-saved registers, all
recorded at the function's first instruction.

Two Targets see the emulated process: snapshot() freezes it into a
plugin.target.SnapshotTarget (what a debugger stop gives the engine), and
EmulatorTarget reads the live emulator memory (for stepping every
instruction without copying the stack each time).
"""

import bisect
import hashlib
import struct

from compact_support import FLAGS, MACHO_FIXTURES, build_macho, symbols
from macho_emulator import (ARM64_REGS, ARM64_RET, LOAD_ADDRESS, SENTINEL, STACK_BASE, STACK_SIZE, X86_REGS,
                            call_from_fresh_stack, load_image, return_at_entry)

from plugin.errors import MemoryReadError
from plugin.target import Mapping, ModuleRef, SnapshotTarget, Target

import unicorn  # noqa: E402  (a test dependency: missing means the set-up was not run)

SOURCE = "unwind_engine.c"
DEPTH = 4
MODULE_NAME = "unwind_engine.dylib"
# Registers the shadow stack records as "the caller's": callee-saved ones the
# emulator hooks can read (arm64 d8-d15 are left out: ARM64_REGS has no FP).
CALLEE_SAVED = {"x86_64": (3, 6, 12, 13, 14, 15), "arm64": tuple(range(19, 30))}


def build(arch, flags):
    """(dylib, assembly) of unwind_engine.c; the define makes the build cache
    key follow the content of the unwind_shapes.c it includes."""
    key = hashlib.sha256((MACHO_FIXTURES / "unwind_shapes.c").read_bytes()).hexdigest()[:12]
    return build_macho(SOURCE, arch, FLAGS[flags] + ["-DSHAPES_KEY=%s" % key])


class Emulation:
    """One build of the fixture loaded in Unicorn, ready to run engine_main."""

    def __init__(self, arch, flags):
        self.arch_key = arch
        self.flags = flags
        self.path, self.asm = build(arch, flags)
        self.uc, self.macho = load_image(self.path, arch)
        self.arch = self.macho.arch
        self.regs_map = X86_REGS if arch == "x86_64" else ARM64_REGS
        self.sp = self.arch.sp
        self.pc = self.arch.pc
        slide = self.macho.slide
        starts = sorted((address + slide, name) for name, address in symbols(self.path).items())
        text = self.macho.section("__TEXT", "__text")
        text_end = text.addr + text.size + slide
        self.functions = [(start, starts[i + 1][0] if i + 1 < len(starts) else text_end, name)
                          for i, (start, name) in enumerate(starts)]
        self._starts = [f[0] for f in self.functions]
        self.address_of = {name: start for start, _, name in self.functions}
        self.shadow = []

    # -- state ---------------------------------------------------------------------

    def registers(self):
        """DWARF number -> value of every register the tests read."""
        return {n: self.uc.reg_read(r) for n, r in self.regs_map.items()}

    def function_at(self, address):
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self.functions[i][1]:
            return self.functions[i][2]
        return None

    def is_return(self, address, size):
        code = bytes(self.uc.mem_read(address, size))
        return code == b"\xc3" or code == ARM64_RET

    # -- running -------------------------------------------------------------------

    def run(self, on_instruction, entry="engine_main", depth=DEPTH, limit=20_000_000):
        """Run entry(depth) from a fresh stack. on_instruction(address) is
        called before each instruction, with self.shadow up to date (a
        function's frame is pushed at its first instruction and popped after
        its return instruction was seen); returning True stops the run.
        Returns True if the callback stopped it, False if entry returned."""
        uc = self.uc
        regs = self.regs_map
        call_from_fresh_stack(uc, self.arch_key, depth)
        self.shadow = []
        starts = {start: name for start, _, name in self.functions}
        stopped = []
        saved_numbers = CALLEE_SAVED[self.arch_key]

        def on_code(uc, address, size, _):
            if address in starts:
                ra, caller_sp = return_at_entry(uc, self.arch_key)
                saved = {n: uc.reg_read(regs[n]) for n in saved_numbers}
                frame = (starts[address], ra, caller_sp, saved)
                if self.shadow and self.shadow[-1][1:3] == frame[1:3]:
                    self.shadow[-1] = frame          # a tail call replaces its caller's frame
                else:
                    self.shadow.append(frame)
            if on_instruction(address):
                stopped.append(address)
                uc.emu_stop()
                return
            if self.is_return(address, size):
                self.shadow.pop()

        hook = uc.hook_add(unicorn.UC_HOOK_CODE, on_code, begin=LOAD_ADDRESS,
                           end=LOAD_ADDRESS + 0x100000)
        try:
            uc.emu_start(self.address_of[entry], SENTINEL, count=limit)
        finally:
            uc.hook_del(hook)
        return bool(stopped)

    # -- Targets -------------------------------------------------------------------

    def module_ref(self):
        return ModuleRef(MODULE_NAME, LOAD_ADDRESS, str(self.path))

    def mapping_list(self):
        out = []
        for seg in self.macho.segments:
            if seg.vmsize:
                start = seg.vmaddr + self.macho.slide
                out.append(Mapping(start, start + seg.vmsize, True, bool(seg.initprot & 2),
                                   bool(seg.initprot & 4), MODULE_NAME))
        out.append(Mapping(STACK_BASE, STACK_BASE + STACK_SIZE, True, True, False, "[stack]"))
        return out

    def snapshot(self):
        """The stopped process as a SnapshotTarget: every mapping's bytes, the
        registers, the module (found from its header, like a debugger's
        image list) and the function symbols."""
        regions = [(m.start, bytes(self.uc.mem_read(m.start, m.end - m.start)))
                   for m in self.mapping_list()]
        return SnapshotTarget(arch=self.arch, regions=regions, module_refs=[self.module_ref()],
                              registers=self.registers(), mapping_list=self.mapping_list(),
                              symbols=list(self.functions))


class EmulatorTarget(Target):
    """The live emulated process as a Target."""

    def __init__(self, emulation):
        self.emulation = emulation
        self.arch = emulation.arch
        self._mappings = emulation.mapping_list()

    def read_memory(self, address, size):
        if not any(m.start <= address and address + size <= m.end for m in self._mappings):
            raise MemoryReadError(address, size, "not mapped in the emulator")
        return bytes(self.emulation.uc.mem_read(address, size))

    def modules(self):
        return [self.emulation.module_ref()]

    def mappings(self):
        return list(self._mappings)

    def symbol(self, address):
        name = self.emulation.function_at(address)
        return (name, self.emulation.address_of[name]) if name else None


# ---------------------------------------------------------------------------
# The builds and stops the engine tests and the LLDB Mach-O process tests share
# ---------------------------------------------------------------------------

BUILDS = [(arch, flags) for arch in ("x86_64", "arm64") for flags in FLAGS]
STOPS = ("entry", "call", "ret", "dwarf")


def build_id(value):
    return value if isinstance(value, str) else "-".join(value)


def call_before(em, return_address):
    """Address of the call instruction a return address follows (direct calls only)."""
    if em.arch_key == "x86_64":
        site = return_address - 5
        assert bytes(em.uc.mem_read(site, 1)) == b"\xe8", hex(return_address)
    else:
        site = return_address - 4
        word = struct.unpack("<I", em.uc.mem_read(site, 4))[0]
        assert word >> 26 == 0b100101, hex(return_address)      # BL
    return site


def stop_address(em, stop):
    """The instruction the run stops at (first hit), for each kind of stop."""
    stop_here = em.address_of["stop_here"]
    if stop == "entry":
        return stop_here
    if stop == "dwarf":
        return em.address_of["dwarf_only"] + 4
    if stop == "call":
        em.run(lambda address: address == stop_here)
        return call_before(em, em.shadow[-1][1])
    # ret: stop_here's first return instruction, found by a first run
    found = []

    def at_return(address):
        size = 1 if em.arch_key == "x86_64" else 4
        if em.function_at(address) == "stop_here" and em.is_return(address, size):
            found.append(address)
            return True
        return False

    em.run(at_return)
    return found[0]


def frozen_at(em, stop):
    """(SnapshotTarget, truth shadow stack) with the emulator stopped at `stop`."""
    address = stop_address(em, stop)
    assert em.run(lambda a: a == address), "never reached 0x%x" % address
    return em.snapshot(), list(em.shadow)
