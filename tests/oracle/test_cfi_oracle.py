"""Row-for-row comparison of execute() with readelf and llvm-dwarfdump.

For every input, every CIE and FDE the tool lists must be one we decode
(same offsets, CIE links and pc ranges), and every FDE's rows must agree
after the normalization in test_cfi_tools.collapse. Inputs: chain.c built
five ways, the system libc and dynamic loader, and the CFI inputs of the
oracle corpus. Tool output comes from the corpus's derived/ dumps where
they exist (made with the same tool versions) and from running the tools
here otherwise.
"""

import functools
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from plugin.arch import BY_ELF_MACHINE, x86_64
from plugin.formats.cfi import FDE, CfiSection, execute
from plugin.memory import Region
from support import build, need_tool, oracle_dir, system_library
from cfi_dumps import (MIPS, collapse, inside, llvm_key, llvm_names, llvm_row_key, parse_llvm,
                       parse_readelf, readelf_key, readelf_names, readelf_row_key)

# -wN: do not follow .gnu_debuglink into a separate debug file (whose
# .eh_frame is NOBITS); the tables compared are the ones in the file itself.
READELF = ["readelf", "-wN", "--debug-dump=frames-interp"]
LLVM = ["llvm-dwarfdump-16", "--eh-frame", "--debug-frame"]

CHAIN_FLAGS = {
    "O0": ["-O0"],
    "O2": ["-O2"],
    "O2-omit-fp": ["-O2", "-fomit-frame-pointer"],
    "O0-debug-frame": ["-O0", "-fno-asynchronous-unwind-tables"],
}

# Corpus inputs: the ELF file, and the derived dumps MANIFEST.md lists for it
# (None: no dump there, the tool is run here on the same file).
READELF_DUMPS = "derived/binutils-readelf-2.40/"
LLVM_DUMPS = "derived/llvm-dwarfdump-16.0.6/"
CORPUS = {
    "symbolic-linux-crash": (
        "symbolic/symbolic-testutils/fixtures/linux/crash",
        ".readelf-debug-dump-frames-interp.txt", ".llvm-dwarfdump-frames.txt"),
    "symbolic-arm64-cfi_test": (
        "symbolic/symbolic-testutils/fixtures/linux/arm64/cfi_test",
        ".readelf-debug-dump-frames-interp.txt", ".llvm-dwarfdump-frames.txt"),
    "framehop-aarch64-vdso": (
        "framehop/fixtures/linux/aarch64/vdso.so",
        ".readelf-debug-dump-frames-interp.txt", ".llvm-dwarfdump-frames.txt"),
    "llvm-eh_frame-mipsel": (
        "llvm-project-16.0.4/llvm/test/tools/llvm-objdump/Inputs/eh_frame.elf-mipsel",
        ".readelf-debug-dump-frames-interp.txt", ".llvm-dwarfdump-frames.txt"),
    "llvm-dwarfdump-test-32bit": (
        "llvm-project-16.0.4/llvm/test/DebugInfo/Inputs/dwarfdump-test-32bit.elf.o",
        None, None),
}
GIMLI = "gimli/fixtures/self/eh_frame"
GIMLI_VMA = 0x100192F38

INPUTS = (["chain-" + k for k in CHAIN_FLAGS] + ["libc.so.6", "ld-linux-x86-64.so.2"]
          + list(CORPUS) + ["gimli-eh_frame"])

def run_tool(argv, path):
    need_tool(argv[0])
    done = subprocess.run(argv + [str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def dump_or_run(argv, path, dump):
    """The corpus's dump when there is one (it must then exist), else the tool's output."""
    if dump is None:
        return run_tool(argv, path)
    assert dump.is_file(), "derived dump missing: %s" % dump
    return dump.read_text()


class Input:
    """The sections of one input, its arch and both tools' output."""

    def __init__(self, name, arch, sections, readelf_text, llvm_text):
        self.name = name
        self.arch = arch
        self.sections = sections            # {".eh_frame": CfiSection, ...}
        self.readelf = parse_readelf(readelf_text)
        self.llvm = parse_llvm(llvm_text)


def sections_of_elf(path):
    """CfiSections for the .eh_frame / .debug_frame of an ELF file, read with
    pyelftools: section bytes at the section's address (0 for .debug_frame)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        machine = elf.header["e_machine"]
        machine_numbers = {"EM_X86_64": 62, "EM_386": 3, "EM_AARCH64": 183, "EM_MIPS": 8}
        number = machine_numbers.get(machine, machine)
        arch = MIPS if number == 8 else BY_ELF_MACHINE[number]
        order = "little" if elf.little_endian else "big"
        sections = {}
        for name, kind in ((".eh_frame", "eh_frame"), (".debug_frame", "debug_frame")):
            section = elf.get_section_by_name(name)
            if section is None or section["sh_type"] == "SHT_NOBITS":
                continue
            region = Region.from_bytes(name, section["sh_addr"], section.data(), order)
            sections[name] = CfiSection(region, kind, arch)
    return arch, sections


@functools.lru_cache(maxsize=None)
def load(name, tmp_root):
    if name.startswith("chain-"):
        flags = CHAIN_FLAGS[name[len("chain-"):]]
        path = build("chain.c", flags)
        arch, sections = sections_of_elf(path)
        return Input(name, arch, sections, run_tool(READELF, path), run_tool(LLVM, path))
    if name in ("libc.so.6", "ld-linux-x86-64.so.2"):
        path = system_library(name)
        arch, sections = sections_of_elf(path)
        return Input(name, arch, sections, run_tool(READELF, path), run_tool(LLVM, path))
    root = oracle_dir()
    if name == "gimli-eh_frame":
        return load_gimli(root, tmp_root)
    relative, readelf_suffix, llvm_suffix = CORPUS[name]
    path = root / relative
    arch, sections = sections_of_elf(path)
    readelf_dump = root / (READELF_DUMPS + relative + readelf_suffix) if readelf_suffix else None
    llvm_dump = root / (LLVM_DUMPS + relative + llvm_suffix) if llvm_suffix else None
    return Input(name, arch, sections, dump_or_run(READELF, path, readelf_dump),
                 dump_or_run(LLVM, path, llvm_dump))


def load_gimli(root, tmp_root):
    """gimli's raw macOS __eh_frame: decoded as bytes at its documented VMA;
    the tools read it wrapped in an ELF the way MANIFEST.md describes."""
    from pathlib import Path
    raw = root / GIMLI
    data = raw.read_bytes()
    section = CfiSection(Region.from_bytes(".eh_frame", GIMLI_VMA, data), "eh_frame", x86_64.ARCH)
    # readelf's derived dump of it is the non-interp "frames" form: readelf
    # frames-interp is run here instead.
    llvm_dump = root / (LLVM_DUMPS + GIMLI + ".at-0x100192f38.llvm-dwarfdump-eh-frame.txt")
    wrapped = Path(tmp_root) / "gimli-eh_frame.elf"
    if not wrapped.exists():
        subprocess.run([need_tool("objcopy"), "-I", "binary", "-O", "elf64-x86-64",
                        "--change-section-address", ".data=0x%x" % GIMLI_VMA,
                        "--rename-section", ".data=.eh_frame", str(raw), str(wrapped)],
                       check=True, capture_output=True)
    return Input("gimli-eh_frame", x86_64.ARCH, {".eh_frame": section},
                 run_tool(READELF, wrapped), dump_or_run(LLVM, wrapped, llvm_dump))


@pytest.fixture(scope="session")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cfi-oracle"))


def check_entries(ours, theirs, where):
    """Same CIEs and FDEs, same links and ranges."""
    mine = {e.offset: e for e in ours.entries()}
    assert sorted(mine) == sorted(theirs), "%s: entry offsets differ" % where
    for offset, tool in theirs.items():
        entry = mine[offset]
        assert (tool.kind == "FDE") == isinstance(entry, FDE), "%s+0x%x" % (where, offset)
        if tool.kind == "FDE":
            mask = (1 << (8 * entry.cie.address_size)) - 1
            assert (entry.cie.offset, entry.start & mask, entry.end & mask) == \
                (tool.cie, tool.start, tool.end), "%s+0x%x" % (where, offset)
        elif tool.ra is not None:
            assert entry.ra_register == tool.ra, "%s+0x%x" % (where, offset)
    return mine


def compare_rows(data, tool_name, tool_sections, expected_of, key_of):
    """{section: (FDEs, rows)}: every FDE's rows equal the tool's, within the FDE's range.

    expected_of(fde, tool_entry, tool_entries) gives the tool's [(address, key)];
    key_of(row) the same key for one of ours.
    """
    counts = {}
    for section_name, section in data.sections.items():
        fdes = rows = 0
        theirs = tool_sections.get(section_name, {})
        mine = check_entries(section, theirs, "%s %s" % (data.name, section_name))
        for offset, tool in theirs.items():
            if tool.kind != "FDE":
                continue
            fde = mine[offset]
            expected = inside(expected_of(fde, tool, theirs), fde.start, fde.end)
            got = [(r.address, key_of(r)) for r in execute(fde, data.arch)]
            assert collapse(got) == collapse(expected), \
                "%s %s FDE 0x%x: rows differ from %s" % (data.name, section_name, offset, tool_name)
            fdes += 1
            rows += len(collapse(expected))
        counts[section_name] = (fdes, rows)
    return counts


def compare_readelf(data):
    """{section: (FDEs, rows)} compared with readelf."""
    names = readelf_names(data.arch)

    def expected_of(fde, tool, theirs):
        if tool.rows:
            return [(a, readelf_row_key(c, cells, fde.cie.ra_register, names)) for a, c, cells in tool.rows]
        # readelf prints no table for an FDE whose program is all
        # DW_CFA_nop; then its one row is the CIE's initial row.
        assert not any(fde.instructions), "0x%x: readelf printed no rows" % fde.offset
        return [(fde.start, readelf_row_key(c, cells, fde.cie.ra_register, names))
                for _, c, cells in theirs[fde.cie.offset].rows]
    return compare_rows(data, "readelf", data.readelf, expected_of, readelf_key)


def compare_llvm(data):
    """{section: (FDEs, rows)} compared with llvm-dwarfdump."""
    names = llvm_names(data.arch)
    aarch64 = data.arch.name == "aarch64"

    def expected_of(fde, tool, theirs):
        assert tool.rows, "%s: llvm-dwarfdump printed no rows for FDE 0x%x" % (data.name, fde.offset)
        return [(a, llvm_row_key(text, names, aarch64)) for a, text in tool.rows]
    return compare_rows(data, "llvm-dwarfdump", data.llvm, expected_of,
                        lambda row: llvm_key(row, data.arch, names))


def report(name, tool, counts):
    assert sum(fdes for fdes, _ in counts.values()) > 0
    for section_name, (fdes, rows) in sorted(counts.items()):
        print("\n%s %s: %s: %d FDEs, %d rows compared" % (name, section_name, tool, fdes, rows))


@pytest.mark.parametrize("name", INPUTS)
def test_rows_match_readelf(name, tmp_root):
    report(name, "readelf", compare_readelf(load(name, tmp_root)))


@pytest.mark.parametrize("name", INPUTS)
def test_rows_match_llvm_dwarfdump(name, tmp_root):
    report(name, "llvm-dwarfdump", compare_llvm(load(name, tmp_root)))


def test_inputs_cover_what_they_are_here_for(tmp_root):
    """The matrix is only worth its time if it contains the cases it claims."""
    debug = load("chain-O0-debug-frame", tmp_root)
    assert ".debug_frame" in debug.sections and debug.sections[".debug_frame"].fdes()
    # gcc 12 uses DRAP (CFA = *(rbp-8), a def_cfa_expression) for `realign`
    # at -O0; at -O2 it realigns with a frame pointer instead.
    drap = load("chain-O0", tmp_root)
    expressions = [row.cfa.expression for fde in drap.sections[".eh_frame"].fdes()
                   for row in execute(fde, drap.arch)
                   if row.cfa is not None and row.cfa.kind == "expression"]
    assert bytes([0x76, 0x78, 0x06]) in expressions        # DW_OP_breg6 -8; DW_OP_deref
    mips = load("llvm-eh_frame-mipsel", tmp_root)
    assert set(mips.sections) == {".eh_frame", ".debug_frame"}
    assert mips.sections[".eh_frame"].cie_at(0).augmentation == "zPLR"
