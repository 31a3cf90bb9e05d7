"""The kernel as a module without an ELF header (plugin.modules.kernel), its symbol file made
from /proc/kallsyms (plugin.modules.kallsyms), and the `orc` source in the engine's walk, on a
guest memory built here: ORC tables laid out as the kernel's orc_types.h says, a stack with a
call chain, an interrupt's pt_regs and a syscall's pt_regs from user mode. readelf and GDB are
the oracles for the symbol file."""
import re
import shutil
import struct
import subprocess

import pytest

from plugin import arch as arches
from plugin.engine import unwind
from plugin.formats.orc import OrcReg
from plugin.formats.orc_rules import PT_REGS
from plugin.model.stops import StopReason
from plugin.modules import ModuleMap, kallsyms, kernel
from plugin.target import SnapshotTarget

X86 = arches.by_name("x86_64")
TEXT = 0xFFFFFFFF81000000
BANNER, IPS, ENTRIES = 0xFFFFFFFF82000000, 0xFFFFFFFF82100000, 0xFFFFFFFF82200000
STACK = 0xFFFFC90000010000
# functions: (name, start); ORC rows (ip, sp_reg, sp_offset, bp_reg, bp_offset, type bits V1)
FUNCS = [("leaf", TEXT + 0x100), ("middle", TEXT + 0x200), ("interrupted", TEXT + 0x300),
         ("asm_irq", TEXT + 0x400), ("entry_SYSCALL_64", TEXT + 0x500), ("end", TEXT + 0x600),
         ("on_irq_stack", TEXT + 0x700)]
ROWS = [(TEXT, 0, 0, 0, 0, 0),                                  # undefined, not end (V1)
        (TEXT + 0x100, OrcReg.SP, 8, 0, 0, 0),                  # leaf: CALL, cfa=sp+8
        (TEXT + 0x200, OrcReg.SP, 24, OrcReg.PREV_SP, -16, 0),  # middle: CALL, cfa=sp+24, bp at cfa-16
        (TEXT + 0x300, OrcReg.BP, 16, OrcReg.PREV_SP, -16, 0),  # interrupted: CALL, cfa=bp+16
        (TEXT + 0x400, OrcReg.SP, 0, 0, 0, 1),                  # asm_irq: REGS at sp
        (TEXT + 0x500, OrcReg.SP, 0, 0, 0, 1),                  # entry_SYSCALL_64: REGS at sp
        (TEXT + 0x600, 0, 0, 0, 0, 0),
        (TEXT + 0x700, OrcReg.SP_INDIRECT, 16, 0, 0, 0)]       # on_irq_stack: CALL, cfa=[sp]+16 (v5.12)
SYMBOLS = [(TEXT, "T", "_stext"), (TEXT, "T", "_text"), (TEXT + 0x100000, "T", "_etext"),
           (BANNER, "D", "linux_banner"), (IPS, "D", "__start_orc_unwind_ip"),
           (IPS + 4 * len(ROWS), "D", "__stop_orc_unwind_ip"), (ENTRIES, "D", "__start_orc_unwind"),
           (ENTRIES + 6 * len(ROWS), "D", "__stop_orc_unwind")] + [(a, "t", n) for n, a in FUNCS]


def kallsyms_text(symbols=SYMBOLS):
    return "".join("%016x %s %s\n" % s for s in symbols)


def orc_memory(slide=0, release="6.1.0-test"):
    ips = b"".join(struct.pack("<i", ip + slide - (IPS + slide + 4 * i)) for i, (ip, *_r) in enumerate(ROWS))
    entries = b"".join(struct.pack("<hhH", off, bpoff, sp | bp << 4 | t << 8) for _, sp, off, bp, bpoff, t in ROWS)
    banner = b"Linux version %s (builder@example.org) (gcc 12.2.0) #1 SMP\n\0" % release.encode()
    return [(IPS + slide, ips), (ENTRIES + slide, entries), (BANNER + slide, banner)]


def pt_regs(ip, sp, cs, bp=0):
    words = dict.fromkeys(PT_REGS, 0)
    words.update(ip=ip, sp=sp, cs=cs, bp=bp, bx=0x1234)
    return b"".join(struct.pack("<Q", words[name]) for name in sorted(PT_REGS, key=PT_REGS.get))


class KernelTarget(SnapshotTarget):
    """A guest with no ELF header anywhere: the kernel is found from its symbol file."""
    files = ()

    def symbol_files(self):
        return list(self.files)


@pytest.fixture
def symbol_file(tmp_path):
    (tmp_path / "kallsyms").write_text(kallsyms_text() + "0000000000000000 A fixed_percpu_data\n")
    out = tmp_path / "kernel.elf"
    assert kallsyms.write(str(tmp_path / "kallsyms"), str(out)) == len(SYMBOLS)
    return out


def test_symbol_file_reads_as_readelf_and_gdb_read_it(symbol_file):
    for tool in ("readelf", "gdb"):
        if shutil.which(tool) is None:
            pytest.fail("%s is missing: run tests/setup.sh" % tool)
    listing = subprocess.run(["readelf", "-sW", str(symbol_file)], capture_output=True, text=True, check=True).stdout
    rows = {line.split()[-1]: line.split() for line in listing.splitlines() if line.strip()[:1].isdigit()}
    assert int(rows["middle"][1], 16) == TEXT + 0x200 and rows["middle"][3] == "FUNC" and rows["middle"][4] == "LOCAL"
    assert rows["middle"][2] == str(0x100)          # sized to the next symbol
    assert rows["__start_orc_unwind_ip"][3] == "OBJECT" and rows["__start_orc_unwind_ip"][4] == "GLOBAL"
    assert "fixed_percpu_data" not in rows          # not a kernel-space address
    # the entry point is never 0: GDB ends a bt silently at a frame in no function (function 0) otherwise
    header = subprocess.run(["readelf", "-hW", str(symbol_file)], capture_output=True, text=True, check=True).stdout
    entry = int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)", header).group(1), 16)
    assert entry == min(address for address, _, _ in SYMBOLS if address >= 0xFFFF800000000000), header
    gdb = subprocess.run(["gdb", "-nx", "-batch", "-ex", "symbol-file %s" % symbol_file,
                          "-ex", "info symbol 0x%x" % (TEXT + 0x210), "-ex", "print/x &__start_orc_unwind_ip"],
                         capture_output=True, text=True, timeout=60).stdout
    assert "middle + 16 in section .kernel" in gdb and "0x%x" % IPS in gdb, gdb


def test_kernel_symbols_and_kaslr_slide(symbol_file):
    symbols = kernel.file_symbols(str(symbol_file))
    assert symbols["__start_orc_unwind_ip"] == IPS and symbols["_etext"] == TEXT + 0x100000
    for slide in (0, 0x2e00000):
        target = SnapshotTarget(X86, regions=orc_memory(slide))
        assert kernel.find_slide(symbols, target.read_memory) == slide
    module = kernel.discover_kernel([str(symbol_file)], SnapshotTarget(X86, regions=orc_memory(0x2e00000)).read_memory,
                                    X86)
    assert module.tables[".orc_unwind_ip"].address == IPS + 0x2e00000 and module.load_bias == 0x2e00000
    assert "symbol-file %s -o 0x2e00000" % symbol_file in module.problems[0]
    assert kernel.find_slide(symbols, SnapshotTarget(X86, regions=[]).read_memory) is None
    absent = kernel.discover_kernel([str(symbol_file)], SnapshotTarget(X86, regions=[]).read_memory, X86)
    assert "the kernel is not running yet" in absent


def _guest(symbol_file, stack, registers, release="6.1.0-test"):
    target = KernelTarget(X86, regions=orc_memory(release=release) + [(STACK, stack)], registers=registers)
    target.files = [str(symbol_file)]
    target.symbols = [(start, start + 0x100, name) for name, start in FUNCS]
    return target


def test_walk_through_an_interrupt_to_user_mode(symbol_file):
    # leaf (sp=STACK) <- middle (cfa sp+8) <- interrupted (bp chain) <- pt_regs of an irq
    # <- kernel code at an exact pc <- the syscall's pt_regs from user mode
    stack = bytearray(0x400)

    def put(address, data):
        stack[address - STACK:address - STACK + len(data)] = data
    put(STACK, struct.pack("<Q", TEXT + 0x250))                 # leaf's return into middle
    put(STACK + 8 + 8, struct.pack("<Q", STACK + 0x60))         # middle: saved bp at cfa-16 (cfa = STACK+32)
    put(STACK + 8 + 16, struct.pack("<Q", TEXT + 0x350))        # middle's return into interrupted, at cfa-8
    # interrupted: cfa = bp+16 = STACK+0x70; return address at cfa-8: into asm_irq after its call
    put(STACK + 0x60, struct.pack("<Q", 0))                     # saved bp at cfa-16
    put(STACK + 0x68, struct.pack("<Q", TEXT + 0x420))
    put(STACK + 0x70, pt_regs(TEXT + 0x380, STACK + 0x200, 0x10, bp=STACK + 0x1f0))   # REGS at cfa (sp+0)
    # the kernel code interrupted at 0x380 (exact): interrupted's row cfa=bp+16 = STACK+0x200
    put(STACK + 0x1f0, struct.pack("<Q", 0))
    put(STACK + 0x1f8, struct.pack("<Q", TEXT + 0x510))         # into entry_SYSCALL_64
    put(STACK + 0x200, pt_regs(0x401000, 0x7FFC0000, 0x33))     # the syscall's pt_regs: user mode
    target = _guest(symbol_file, bytes(stack), {})
    registers = {X86.pc: TEXT + 0x120, X86.sp: STACK, X86.fp: 0x99}
    bt = unwind(target, registers, ("cfi", "orc"), modules=ModuleMap(target))
    names = [(f.function, f.method) for f in bt.frames]
    assert names == [("leaf", "context"), ("middle", "orc"), ("interrupted", "orc"), ("asm_irq", "orc"),
                     ("interrupted", "orc"), ("entry_SYSCALL_64", "orc")], names
    assert bt.frames[4].pc == TEXT + 0x380 and bt.frames[4].exact_pc       # the pt_regs' ip, exact
    assert bt.frames[4].registers[3] == 0x1234                             # rbx from pt_regs
    assert 3 not in bt.frames[2].registers                                 # a CALL step knows only sp, bp, ip
    assert bt.stop_reason == StopReason.OUTERMOST and "user mode" in bt.stop_detail
    entry = bt.frames[1].evidence.entry
    assert entry["index"] == 1 and entry["type"] == "call" and entry["layout_by"] == "kernel version string"


@pytest.mark.parametrize("release, caller", [("6.1.0-test", "middle"), ("5.10.0-28-amd64", "interrupted")])
def test_sp_indirect_is_read_as_the_kernels_release_says(symbol_file, release, caller):
    """SP_INDIRECT's CFA is the word at sp, plus sp_offset, since v5.12 (the kernel's unwind_orc.c
    changed with call_on_stack); before, the word at sp + sp_offset. The engine's walk and the plan
    GDB's unwinder replays (plain_row) read it the same way."""
    from plugin.plans import compile_row, evaluate_fast
    from plugin.strategies.orc import plain_row
    stack = bytearray(0x300)

    def put(address, value):
        stack[address - STACK:address - STACK + 8] = struct.pack("<Q", value)
    put(STACK, TEXT + 0x750)                    # leaf returns into on_irq_stack
    put(STACK + 8, STACK + 0x100)               # on_irq_stack's sp holds the other stack's sp...
    put(STACK + 8 + 16, STACK + 0x200)          # ...and sp+16 another word
    put(STACK + 0x108, TEXT + 0x250)            # since v5.12: cfa = STACK+0x100 + 16, into middle
    put(STACK + 0x1f8, TEXT + 0x350)            # before: cfa = STACK+0x200, into interrupted
    target = _guest(symbol_file, bytes(stack), {}, release)
    bt = unwind(target, {X86.pc: TEXT + 0x120, X86.sp: STACK, X86.fp: 0}, ("orc",), modules=ModuleMap(target))
    assert [f.function for f in bt.frames[:3]] == ["leaf", "on_irq_stack", caller], bt.frames
    row = bt.frames[2].evidence.rule.row
    assert row is not None and row == plain_row(bt.frames[2].evidence.rule.entry, row.end, X86,
                                                release.startswith("6"))
    cfa, registers = evaluate_fast(compile_row(row, X86), X86, bt.frames[1].registers, target.read_memory)
    assert (cfa, registers[X86.pc]) == (bt.frames[2].evidence.cfa, bt.frames[2].pc)
    # the explanation writes the rule the walk applied: [sp]+16 since v5.12, [sp+16] before
    from plugin.render import tables
    from plugin.render.explain import explain_text
    written = "[sp]+16" if release.startswith("6") else "[sp+16]"
    text = explain_text(bt.frames[2], X86, callee=bt.frames[1])
    assert "CFA = %s   (ORC entry 7, type call)" % written in text and "cfa=%s" % written in text, text
    listed = tables.text(tables.collect(target, ModuleMap(target), TEXT + 0x750))
    assert "cfa=%s bp=unchanged call" % written in listed, listed


def test_undefined_entry_is_the_outermost_frame_with_its_evidence(symbol_file):
    target = _guest(symbol_file, bytes(64), {})
    bt = unwind(target, {X86.pc: TEXT + 0x610, X86.sp: STACK, X86.fp: 0}, ("orc",), modules=ModuleMap(target))
    assert len(bt.frames) == 1 and bt.stop_reason == StopReason.OUTERMOST
    assert "ORC entry 6" in bt.stop_detail and "undefined" in bt.stop_detail


def test_explain_names_the_entry_its_type_and_rule(symbol_file):
    from plugin.render.explain import explain_text, frame_json
    stack = bytearray(0x300)
    stack[0:8] = struct.pack("<Q", TEXT + 0x420)                # leaf returns into asm_irq
    stack[8:8 + 168] = pt_regs(TEXT + 0x380, STACK + 0x200, 0x33)
    target = _guest(symbol_file, bytes(stack), {})
    bt = unwind(target, {X86.pc: TEXT + 0x120, X86.sp: STACK, X86.fp: 0}, ("orc",), modules=ModuleMap(target))
    assert [f.function for f in bt.frames] == ["leaf", "asm_irq"] and "user mode" in bt.stop_detail
    text = explain_text(bt.frames[1], X86, callee=bt.frames[0])
    assert "ORC entry 1 at 0x%x: cfa=sp+8 bp=unchanged call" % (TEXT + 0x100) in text, text
    assert "CFA = sp+8   (ORC entry 1, type call)" in text and "rip = [CFA-8]   rsp = CFA" in text, text
    assert frame_json(bt.frames[1], X86, detail=True)["evidence"]["rule"] == {"orc": "cfa=sp+8 bp=unchanged call",
                                                                              "type": "call"}


def test_a_kernel_not_yet_in_memory_is_looked_for_again_at_the_next_stop(symbol_file):
    target = KernelTarget(X86, regions=[])
    target.files, target.stops = [str(symbol_file)], 0
    modules = ModuleMap(target)
    assert modules.find(TEXT + 0x120) is None
    assert [f.ref.name for f in modules.failed] == ["[kernel]"] and "not running yet" in modules.failed[0].reason
    target.regions = orc_memory()          # the kernel booted
    assert modules.find(TEXT + 0x120) is None           # same stop: not read again
    target.stops = 1
    assert modules.find(TEXT + 0x120).name == "[kernel]" and modules.failed == []


def test_kallsyms_command_refuses_what_it_cannot_use_in_one_line(tmp_path):
    import sys
    (tmp_path / "user").write_text("0000000000000000 T _stext\nnot a symbol line\n")     # a non-root read
    for given in (tmp_path / "user", tmp_path / "missing", "/dev/zero"):
        done = subprocess.run([sys.executable, "-m", "plugin", "kallsyms", str(given), str(tmp_path / "out.elf")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "read /proc/kallsyms as root" in subprocess.run(
        [sys.executable, "-m", "plugin", "kallsyms", str(tmp_path / "user"), str(tmp_path / "o")],
        capture_output=True, text=True).stderr


def test_tables_at_a_kernel_address_print_the_entry_in_force(symbol_file):
    from plugin.render import tables
    target = _guest(symbol_file, bytes(64), {})
    modules = ModuleMap(target)
    result = tables.collect(target, modules, TEXT + 0x210)
    text = tables.text(result)
    assert "[0x%x, 0x%x) cfa=sp+24 bp=[cfa-16] call" % (TEXT + 0x200, TEXT + 0x300) in text, text
    assert "ORC layout v4.14-v6.2 (by kernel version string), kernel 6.1.0-test" in text, text
