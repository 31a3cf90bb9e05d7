"""A hand-built process for unit tests of the frame-pointer and scan sources (no tests here).

One code module with symbols, a stack, a data page and, on request, an
anonymous executable page (JIT code), all in a SnapshotTarget. Tests lay out
frame records and return addresses word by word, so every check of the two
sources can be fed exactly the damage it must reject.
"""

from plugin import arch as arches
from plugin import engine
from plugin.modules import Module, ModuleMap, Segment
from plugin.strategies.scan import SYMTAB_CACHE_KEY
from plugin.target import Mapping, SnapshotTarget

X86 = arches.BY_NAME["x86_64"]
I386 = arches.BY_NAME["i386"]
A64 = arches.BY_NAME["aarch64"]

CODE, CODE_SIZE = 0x400000, 0x2000
STACK, STACK_SIZE = 0x7FF00000, 0x4000
STACK_TOP = STACK + STACK_SIZE
DATA, DATA_SIZE = 0x600000, 0x1000
JIT, JIT_SIZE = 0x900000, 0x1000

X86_NOP = b"\x90"
A64_NOP = (0xD503201F).to_bytes(4, "little")
X86_PROLOGUE = b"\x55\x48\x89\xe5"          # push rbp; mov rbp, rsp
I386_PROLOGUE = b"\x55\x89\xe5"             # push ebp; mov ebp, esp
A64_PROLOGUE = (0xA9BF7BFD).to_bytes(4, "little") + (0x910003FD).to_bytes(4, "little")  # stp; mov x29, sp


class World:
    def __init__(self, arch=X86):
        self.arch = arch
        nop = A64_NOP if arch is A64 else X86_NOP
        self.code = bytearray(nop * (CODE_SIZE // len(nop)))
        self.jit = bytearray(nop * (JIT_SIZE // len(nop)))
        self.stack = bytearray(STACK_SIZE)
        self.data = bytearray(DATA_SIZE)
        self.symbols = []
        self.has_jit = False
        self.mappings_known = True

    # -- code ----------------------------------------------------------------------
    def function(self, name, offset, size, frame_pointer=True):
        """A function at CODE+offset; with a frame pointer it starts with the usual prologue."""
        if frame_pointer:
            prologue = {"x86_64": X86_PROLOGUE, "i386": I386_PROLOGUE, "aarch64": A64_PROLOGUE}[self.arch.name]
            self.code[offset:offset + len(prologue)] = prologue
        self.symbols.append((CODE + offset, CODE + offset + size, name))
        return CODE + offset

    def start_and_main(self, main_call="rel32"):
        """_start (no frame record) at 0x000 calling main at 0x010; main at 0x100 calling
        the function at 0x200 at 0x120 (with main_call). Returns (ra_start, ra_main)."""
        self.function("_start", 0x000, 0x100, frame_pointer=False)
        self.function("main", 0x100, 0x100)
        return self.call_at(0x010), self.call_at(0x120, main_call)

    def call_at(self, offset, form="rel32", where="code"):
        """Write a call instruction at offset; returns the return address after it."""
        x86 = {"rel32": b"\xe8\x00\x00\x00\x00", "reg": b"\xff\xd0", "rip": b"\xff\x15\x00\x00\x00\x00",
               "r11": b"\x41\xff\xd3"}
        a64 = {"rel32": (0x94000010).to_bytes(4, "little"), "reg": (0xD63F0200).to_bytes(4, "little")}
        code = (a64 if self.arch is A64 else x86)[form]
        buffer, base = (self.code, CODE) if where == "code" else (self.jit, JIT)
        buffer[offset:offset + len(code)] = code
        if where == "jit":
            self.has_jit = True
        return base + offset + len(code)

    def put_code(self, address, data):
        self.code[address - CODE:address - CODE + len(data)] = data

    # -- stack ---------------------------------------------------------------------
    def word(self, address, value):
        size = self.arch.address_size
        assert STACK <= address <= STACK_TOP - size, hex(address)
        self.stack[address - STACK:address - STACK + size] = (value & self.arch.mask).to_bytes(size, "little")

    def record(self, at, saved_fp, return_address):
        """A frame record at `at`: the caller's frame pointer, then the return address."""
        self.word(at, saved_fp)
        self.word(at + self.arch.address_size, return_address)

    # -- the target ------------------------------------------------------------------
    def target(self):
        regions = [(CODE, self.code), (STACK, self.stack), (DATA, self.data)]
        mappings = [Mapping(CODE, CODE + CODE_SIZE, executable=True, name="/bin/prog"),
                    Mapping(DATA, DATA + DATA_SIZE, writable=True, name="/bin/prog", offset=0x2000),
                    Mapping(STACK, STACK_TOP, writable=True, name="[stack]")]
        if self.has_jit:
            regions.append((JIT, self.jit))
            mappings.append(Mapping(JIT, JIT + JIT_SIZE, executable=True, name=""))
        target = SnapshotTarget(self.arch, regions=regions, mapping_list=mappings if self.mappings_known else [],
                                symbols=list(self.symbols))
        target.mappings_known = self.mappings_known
        return target

    def module_map(self, target, symbol_table=True):
        modules = ModuleMap(target)
        module = Module(name="prog", path="/bin/prog", header_address=CODE, arch=self.arch,
                        segments=[Segment(CODE, CODE + CODE_SIZE, True), Segment(DATA, DATA + DATA_SIZE, False)])
        module.cache[SYMTAB_CACHE_KEY] = symbol_table     # as if /bin/prog had (or lacked) a .symtab
        modules.add(module)
        return modules

    def context(self, sources=("frame-pointer", "scan"), scan_words=None, symbol_table=True):
        target = self.target()
        return engine.UnwindContext(target, self.module_map(target, symbol_table), sources, scan_words)

    def unwind(self, registers, sources=("frame-pointer", "scan"), **options):
        target = self.target()
        return engine.unwind(target, registers, sources=sources, modules=self.module_map(target), **options)

    def registers(self, pc, sp, fp=None, **more):
        regs = {self.arch.pc: pc, self.arch.sp: sp}
        if fp is not None:
            regs[self.arch.fp] = fp
        for name, value in more.items():
            regs[self.arch.number_of(name)] = value
        return regs


def x86_chain():
    """_start -> main -> level1 -> leaf, every function with a frame record; stopped inside leaf.

    Returns (world, registers, expected [(pc, sp)] of the callers, innermost first).
    """
    w = World(X86)
    ra_start, ra_main = w.start_and_main()
    w.function("level1", 0x200, 0x100)
    w.function("leaf", 0x300, 0x100)
    ra_level1 = w.call_at(0x220, "reg")
    main_fp, level1_fp, leaf_fp = STACK_TOP - 0x100, STACK_TOP - 0x200, STACK_TOP - 0x300
    w.record(main_fp, 0, ra_start)            # _start zeroes rbp
    w.record(level1_fp, main_fp, ra_main)
    w.record(leaf_fp, level1_fp, ra_level1)
    regs = w.registers(pc=CODE + 0x310, sp=leaf_fp - 0x20, fp=leaf_fp, rbx=0x1234)
    expected = [(ra_level1, leaf_fp + 16), (ra_main, level1_fp + 16), (ra_start, main_fp + 16)]
    return w, regs, expected
