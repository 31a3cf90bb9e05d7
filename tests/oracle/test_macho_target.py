"""Mach-O modules found from memory (plugin/macho_modules.py), the Mach-O
FileTarget (plugin/macho_file_target.py), and how the engine orders and
applies the `compact` source.

Oracle for discovery: `llvm-objdump-16 --macho --private-headers` (through
test_macho's parser: segments, sections, LC_UUID) and `llvm-nm-16` for the
symbols, on the corpus and on files built here. Every file is laid out at a
slide, so addresses must move with it.
"""

import pytest

from support import build, oracle_dir
from compact_support import (FLAGS, LLVM_INPUTS, MACHO_FILES, SOURCE, build_macho, build_unwind_info,
                             private_headers, symbols, wrap_unwind_info)

from plugin import engine
from plugin.errors import DecodeError, MemoryReadError
from plugin.model.evidence import Frame
from plugin.file_targets.elf import FileTarget
from plugin.formats.macho import CPU_TYPE_X86_64
from plugin.file_targets.macho import MachOFileTarget
from plugin.modules.macho import discover_macho, format_uuid
from plugin.modules import ModuleMap, discover
from plugin.model.outcome import AttemptStatus
from plugin.strategies import cfi as cfi_strategy
from plugin.strategies import compact as compact_strategy
from plugin.target import ModuleRef, SnapshotTarget

SLIDE_BASE = 0x7FF812340000
THIN_FILES = [f for f in MACHO_FILES if "fat" not in f]


def _name(path):
    return path.split("/")[-1]


def _uuid_text(raw):
    return None if raw is None else format_uuid(raw)


def check_module(module, target, expected):
    """The discovered module against llvm-objdump's private headers."""
    slide = target.slide
    text = next(s for s in expected["segments"] if s["segname"] == "__TEXT")
    assert module.format == "macho" and module.arch is target.arch
    assert module.header_address == text["vmaddr"] + slide
    assert module.load_bias == slide
    assert module.uuid == _uuid_text(expected["uuid"])
    # every segment with memory, __PAGEZERO (no access) left out
    mapped = [(s["vmaddr"] + slide, s["vmaddr"] + s["vmsize"] + slide)
              for s in expected["segments"] if s["vmsize"] and s["segname"] != "__PAGEZERO"]
    assert sorted((s.start, s.end) for s in module.segments) == sorted(mapped)
    assert [s.executable for s in module.segments if s.start == text["vmaddr"] + slide] == [True]
    for name in ("__unwind_info", "__eh_frame"):
        section = next((s for s in expected["sections"]
                        if s["segname"] == "__TEXT" and s["sectname"] == name), None)
        if section is None:
            assert name not in module.tables
            continue
        location = module.tables[name]
        assert (location.address, location.size) == (section["addr"] + slide, section["size"])
        assert location.found_by == "LC_SEGMENT_64 __TEXT" and location.in_memory


@pytest.mark.parametrize("path", THIN_FILES, ids=_name)
def test_corpus_modules_found_from_memory(path):
    full = oracle_dir() / path
    target = MachOFileTarget(full, base=SLIDE_BASE)
    modules = ModuleMap(target)
    (module,) = modules.all()
    assert modules.failed == []
    check_module(module, target, private_headers(full))
    assert modules.find(module.header_address) is module


def test_fat_file_slices(tmp_path):
    path = oracle_dir() / "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib"
    data = path.read_bytes()
    default = MachOFileTarget(path)
    assert default.arch.name == "x86_64"                  # the first slice
    for arch, name in (("x86_64", "x86_64"), ("arm64", "aarch64")):
        target = MachOFileTarget(path, base=SLIDE_BASE, arch=arch)
        assert target.arch.name == name
        # llvm-objdump on the slice cut out by hand
        thin = tmp_path / arch
        thin.write_bytes(_slice_bytes(data, target))
        (module,) = ModuleMap(target).all()
        check_module(module, target, private_headers(thin))
    with pytest.raises(ValueError, match="no i386 slice"):
        MachOFileTarget(path, arch="i386")


def _slice_bytes(data, target):
    import struct
    count = struct.unpack(">I", data[4:8])[0]
    for i in range(count):
        cputype, _, offset, size, _ = struct.unpack(">5I", data[8 + 20 * i:28 + 20 * i])
        if cputype == target.image.cputype:
            return data[offset:offset + size]
    raise AssertionError("slice not found")


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_built_dylib_module_and_symbols(arch):
    path, _ = build_macho(SOURCE, arch, FLAGS["O2-fp"])
    target = MachOFileTarget(path, base=SLIDE_BASE)
    (module,) = ModuleMap(target).all()
    check_module(module, target, private_headers(path))
    names = symbols(path)
    assert names
    for name, address in names.items():
        runtime = address + target.slide
        assert target.symbol(runtime) == (name, runtime)
        assert target.symbol(runtime + 1) == (name, runtime)
    assert target.symbol(SLIDE_BASE - 1) is None


def test_object_file_section_module():
    """An object file maps no header: no modules, and section_module() gives
    its __eh_frame with its pc_begin relocation pair applied: one FDE over
    __Z3fooi, at 0 in a 0x20-byte __text (llvm-nm, llvm-objdump -h; llvm's
    eh_frame-arm64.test shows the unrelocated pc 0x50...0x70)."""
    path = oracle_dir() / LLVM_INPUTS / "eh_frame.macho-arm64"
    target = MachOFileTarget(path)
    assert target.header_address is None and target.modules() == []
    module = target.section_module()
    assert module.format == "macho" and "__eh_frame" in module.tables
    modules = ModuleMap(target)
    modules.add(module)
    section = cfi_strategy.CfiTables.of(module, target).eh_frame()
    assert section.name == "__eh_frame"
    assert [(f.start, f.end) for f in section.fdes()] == [(0x0, 0x20)]


def test_snapshot_target_discovery_and_bad_headers():
    """discover() on a SnapshotTarget holding only the header pages, and the
    errors of headers that are not there, not Mach-O, or not supported."""
    path, _ = build_macho(SOURCE, "arm64", FLAGS["O0"])
    file_target = MachOFileTarget(path, base=SLIDE_BASE)
    text = next(s for s in file_target.image.segments if s.name == "__TEXT")
    header = file_target.read_memory(SLIDE_BASE, 0x1000)
    target = SnapshotTarget(arch=file_target.arch, regions=[(SLIDE_BASE, header)])
    module = discover(target, ModuleRef("lib", SLIDE_BASE, None))
    assert module.format == "macho" and module.load_bias == SLIDE_BASE - text.vmaddr
    assert module.uuid == format_uuid(file_target.image.uuid)
    with pytest.raises(DecodeError, match="no ELF, Mach-O or PE \\(MZ\\) magic"):
        discover(target, ModuleRef("lib", SLIDE_BASE + 8, None))
    short = SnapshotTarget(arch=file_target.arch, regions=[(SLIDE_BASE, header[:64])])
    with pytest.raises(DecodeError):
        discover(short, ModuleRef("lib", SLIDE_BASE, None))
    ppc = bytearray(header)
    ppc[4:8] = (18).to_bytes(4, "little")                 # CPU_TYPE_POWERPC
    with pytest.raises(DecodeError, match="unsupported cputype 0x12"):
        discover_macho(SnapshotTarget(arch=file_target.arch, regions=[(SLIDE_BASE, bytes(ppc))]),
                       ModuleRef("lib", SLIDE_BASE, None))
    huge = bytearray(header)
    huge[20:24] = (0x7FFFFFFF).to_bytes(4, "little")      # sizeofcmds
    with pytest.raises(DecodeError, match="implausible sizeofcmds"):
        discover(SnapshotTarget(arch=file_target.arch, regions=[(SLIDE_BASE, bytes(huge))]),
                 ModuleRef("lib", SLIDE_BASE, None))
    # ModuleMap keeps an unreadable module with its reason
    gone = SnapshotTarget(arch=file_target.arch, module_refs=[ModuleRef("gone", 0x1000, None)])
    modules = ModuleMap(gone)
    assert modules.all() == [] and "cannot read" in modules.failed[0][1]


# ---------------------------------------------------------------------------
# The engine's source order, and `compact` on ELF modules
# ---------------------------------------------------------------------------

def _frame(arch, pc, sp=0x7000, exact=False):
    return Frame(level=1, pc=pc, registers={arch.pc: pc, arch.sp: sp}, method="test", exact_pc=exact)


def test_compact_goes_before_cfi_for_mach_o_modules_only():
    path, _ = build_macho(SOURCE, "x86_64", FLAGS["O2-fp"])
    target = MachOFileTarget(path, base=SLIDE_BASE)
    ctx = engine.UnwindContext(target)
    assert ctx.sources == engine.DEFAULT_SOURCES
    assert ctx.sources.index("cfi") < ctx.sources.index("compact")    # the configured order
    inside = _frame(target.arch, SLIDE_BASE + 0x500)
    ordered = engine._sources_for(inside, ctx)
    assert ordered[ordered.index("compact") + 1] == "cfi"
    assert sorted(ordered) == sorted(ctx.sources)
    # outside every module, and for an ELF module: the configured order
    assert engine._sources_for(_frame(target.arch, 0x10), ctx) == ctx.sources
    elf = FileTarget(build("chain.c", ["-O2"]), base=0x555555554000)
    elf_ctx = engine.UnwindContext(elf)
    (module,) = elf_ctx.modules.all()
    pc = next(s.start for s in module.segments if s.executable) + 0x10
    assert engine._sources_for(_frame(elf.arch, pc), elf_ctx) == elf_ctx.sources
    outcome = compact_strategy.step(_frame(elf.arch, pc), elf_ctx)
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "not a Mach-O module" in outcome.reason
    # a user's order without cfi is left alone
    only = engine.UnwindContext(target, sources=("compact", "scan"))
    assert engine._sources_for(inside, only) == ("compact", "scan")


def test_cfi_source_reads_mach_o_eh_frame():
    """The `cfi` source on a Mach-O module: __eh_frame from its section header,
    searched through a sorted index (there is no .eh_frame_hdr)."""
    path, _ = build_macho(SOURCE, "x86_64", FLAGS["O2-fp"])
    target = MachOFileTarget(path, base=SLIDE_BASE)
    ctx = engine.UnwindContext(target, sources=("cfi",))
    start = symbols(path)["dwarf_only"] + target.slide
    sp = 0x7000
    frame = Frame(level=0, pc=start + 1, registers={16: start + 1, 7: sp, 3: 0x33}, method="context",
                  exact_pc=True)
    stack = SnapshotTarget(arch=target.arch, regions=[(sp, (0x1234).to_bytes(8, "little") +
                                                       (start + 0x99).to_bytes(8, "little"))])
    ctx.read_memory = lambda address, size: stack.read_memory(address, size)
    outcome = cfi_strategy.step(frame, ctx)
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.evidence.section == "__eh_frame"
    assert outcome.evidence.entry["found_via"] == "sorted index of __eh_frame (no usable .eh_frame_hdr)"
    assert outcome.evidence.cfa == sp + 16 and outcome.registers[16] == start + 0x99
    assert outcome.registers[3] == 0x1234
    assert cfi_strategy.CfiTables.of(ctx.modules.all()[0], target).problems == []


# ---------------------------------------------------------------------------
# `compact` on synthetic tables: every way it declines or fails
# ---------------------------------------------------------------------------

IMAGE_BASE = 0x100000000


def _synthetic(tmp_path, entries):
    """A MachOFileTarget over a minimal x86_64 image whose __unwind_info has
    one regular page with `entries` [(function offset, encoding)], ending at
    0x800. Its code is zeros (the image is header + section)."""
    raw = build_unwind_info([(2, entries[0][0], entries, ())], 0x800)
    path = tmp_path / "synthetic"
    path.write_bytes(wrap_unwind_info(raw, CPU_TYPE_X86_64, IMAGE_BASE, offset=0x1000))
    target = MachOFileTarget(path)
    return target, engine.UnwindContext(target, sources=("compact",))


def test_compact_declines_and_fails_with_reasons(tmp_path):
    target, ctx = _synthetic(tmp_path, [(0x100, 0), (0x200, 0x0F000000), (0x300, 0x04000010),
                                        (0x400, 0x03020000), (0x500, 0x02010000)])
    arch = target.arch

    def step(offset, exact=False):
        return compact_strategy.step(_frame(arch, IMAGE_BASE + offset, exact=exact), ctx)

    none = step(0x110)
    assert none.status == AttemptStatus.NOT_APPLICABLE and "0x00000000" in none.reason
    assert "no unwind information" in none.reason
    unknown = step(0x210)
    assert unknown.status == AttemptStatus.FAILED and "mode not known" in unknown.reason
    assert unknown.evidence.entry["encoding"] == 0x0F000000
    dwarf = step(0x310)
    assert dwarf.status == AttemptStatus.FAILED and "escapes to __eh_frame+0x10" in dwarf.reason
    assert "no readable __eh_frame" in dwarf.reason
    stack_ind = step(0x410)
    assert stack_ind.status == AttemptStatus.FAILED and "sub $imm32" in stack_ind.reason
    before = step(0x90)
    assert before.status == AttemptStatus.NOT_APPLICABLE and "no __unwind_info entry" in before.reason
    # STACK_IMMD size 8 in the body: CFA = sp+8, the return address read at [CFA-8]
    sp = 0x7000
    memory = SnapshotTarget(arch=arch, regions=[(sp, (IMAGE_BASE + 0x123).to_bytes(8, "little"))])
    ctx.read_memory = memory.read_memory
    frame = Frame(level=1, pc=IMAGE_BASE + 0x510, registers={arch.pc: IMAGE_BASE + 0x510, arch.sp: sp},
                  method="test")
    good = compact_strategy.step(frame, ctx)
    assert good.status == AttemptStatus.RECOVERED, good.reason
    assert good.evidence.cfa == sp + 8 and good.registers[arch.pc] == IMAGE_BASE + 0x123
    assert good.evidence.entry["encoding"] == 0x02010000 and good.evidence.entry["mode"] == "STACK_IMMD"
    assert good.evidence.entry["start"] == IMAGE_BASE + 0x500
    assert any("one opcode covers the whole function from 0x%x" % (IMAGE_BASE + 0x500) in n
               and "prologue and epilogue are not exact" in n and "call site" in n
               for n in good.evidence.notes)
    assert good.evidence.row == "CFA=rsp+8 => rip=[CFA-8]"


def test_compact_without_unwind_info_is_not_applicable():
    path = oracle_dir() / LLVM_INPUTS / "eh_frame.macho-arm64"
    target = MachOFileTarget(path)
    modules = ModuleMap(target)
    modules.add(target.section_module())
    ctx = engine.UnwindContext(target, modules)
    outcome = compact_strategy.step(_frame(target.arch, 0x58), ctx)
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "has no __unwind_info" in outcome.reason


def test_stack_ind_reads_only_module_code():
    path, _ = build_macho(SOURCE, "x86_64", FLAGS["O2-nofp"])
    target = MachOFileTarget(path)
    (module,) = ModuleMap(target).all()
    tables = compact_strategy.CompactTables.of(module, target)
    text = next(s for s in module.segments if s.executable)
    assert len(tables.read_code(text.start, 4)) == 4
    with pytest.raises(MemoryReadError, match="not in an executable segment"):
        tables.read_code(text.end - 2, 4)
