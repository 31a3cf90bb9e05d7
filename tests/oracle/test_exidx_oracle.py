"""ARM EHABI decoding equals binutils `readelf -u`, `llvm-readobj-16 --unwind` and pyelftools.

Inputs: Debian's armhf libc, libstdc++, libgcc_s and ld.so; the corpus'
Android `release-libmozglue.so` (its two stored dumps,
made by readelf 2.40 and llvm-readelf 16, and the tools run here) and the
ehabi.cpp fixture built with arm-linux-gnueabihf-g++ in Arm and Thumb-2,
-O0 and -O2, dynamic and static (the static one brings glibc's and
libstdc++'s tables: VFP pops, __gxx/__gcc_personality_v0 entries whose
opcodes readelf decodes).

llvm-readobj does not decode the opcodes of a generic-model entry, so for
those only the personality routine is compared with it.
"""

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, given, settings, strategies as st

from exidx_dumps import file_table, meaning_from_text, parse_llvm, parse_readelf, plugin_entries
from plugin import arch as arches
from plugin.errors import DecodeError
from plugin.formats.exidx import ExidxTable
from plugin.memory import Region
from plugin.strategies.exidx import plan
from qemu_arm import ARM_THUMB
from support import build, need_tool, oracle_dir, run

MOZGLUE = "framehop/fixtures/android/arm/release-libmozglue.so"
READELF_DUMP = "derived/binutils-readelf-2.40/" + MOZGLUE + ".readelf-u.txt"
LLVM_DUMP = "derived/llvm-readelf-16.0.6/" + MOZGLUE + ".llvm-readelf-unwind.txt"

BUILDS = {
    **ARM_THUMB,
    "thumb-O2-static": ["-O2", "-mthumb", "-static"],
    "arm-O2-static": ["-O2", "-marm", "-static"],
}


def _built(flags):
    need_tool("arm-linux-gnueabihf-g++")
    return build("ehabi.cpp", ["-funwind-tables", *flags], compiler="arm-linux-gnueabihf-g++")


def _readelf(path):
    out = run([need_tool("readelf"), "-u", "--wide", str(path)])
    assert out.returncode == 0, out.stderr
    return out.stdout


def _llvm(path):
    out = run([need_tool("llvm-readobj-16"), "--unwind", str(path)])
    assert out.returncode == 0, out.stderr
    return out.stdout


def _same_as_readelf(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, want in zip(ours, theirs):
        assert mine == want, hex(want["function"])


def _same_as_llvm(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, want in zip(ours, theirs):
        if want["personality"] is not None:      # generic model: llvm shows no opcodes
            mine = dict(mine, ops=None)
        assert mine == want, hex(want["function"])


def _mozglue():
    root = oracle_dir()
    table, names = file_table(root / MOZGLUE)
    return root, plugin_entries(table, names)


def test_mozglue_equals_stored_readelf_dump():
    root, ours = _mozglue()
    theirs = parse_readelf((root / READELF_DUMP).read_text())
    assert len(theirs) == 2382
    _same_as_readelf(ours, theirs)


def test_mozglue_equals_stored_llvm_dump():
    root, ours = _mozglue()
    theirs = parse_llvm((root / LLVM_DUMP).read_text())
    assert len(theirs) == 2382
    _same_as_llvm(ours, theirs)


def test_mozglue_equals_tools_run_here():
    root, ours = _mozglue()
    _same_as_readelf(ours, parse_readelf(_readelf(root / MOZGLUE)))
    _same_as_llvm(ours, parse_llvm(_llvm(root / MOZGLUE)))


def test_mozglue_has_every_entry_kind():
    _, ours = _mozglue()
    kinds = {e["kind"] for e in ours}
    assert kinds == {"cantunwind", "inline", "table"}
    assert any(e["personality"] is not None for e in ours)
    assert any(e["ops"] and any(m[0] == "pop-vfp" for _, m in e["ops"]) for e in ours)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_built_equals_readelf_and_llvm(name):
    path = _built(BUILDS[name])
    table, names = file_table(path)
    ours = plugin_entries(table, names)
    _same_as_readelf(ours, parse_readelf(_readelf(path)))
    _same_as_llvm(ours, parse_llvm(_llvm(path)))
    decoded = [e for e in ours if e["ops"]]
    assert len(decoded) >= 6


CROSS_LIBRARIES = ["libc.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-armhf.so.3"]


@pytest.mark.parametrize("name", CROSS_LIBRARIES)
def test_debian_armhf_libraries_equal_readelf_and_llvm(name):
    """Real-world tables: Debian's armhf cross libraries (installed with g++-arm-linux-gnueabihf)."""
    need_tool("arm-linux-gnueabihf-g++")
    path = "/usr/arm-linux-gnueabihf/lib/" + name
    table, names = file_table(path)
    ours = plugin_entries(table, names)
    assert len(ours) > 20
    _same_as_readelf(ours, parse_readelf(_readelf(path)))
    _same_as_llvm(ours, parse_llvm(_llvm(path)))


def test_static_build_decodes_gcc_personality_opcodes():
    path = _built(BUILDS["thumb-O2-static"])
    table, names = file_table(path)
    ours = plugin_entries(table, names)
    generic = [e for e in ours if e["personality"] is not None]
    assert generic and all(e["ops"] for e in generic)
    used = {m[0] for e in ours for _, m in (e["ops"] or ())}
    assert {"vsp-add", "pop", "finish", "vsp-from-register", "pop-vfp"} <= used


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1, max_size=12),
       st.booleans())
def test_mutated_mozglue_tables_decode_or_raise_decode_error(flips, in_index):
    """The real tables with bytes overwritten: every entry decodes and plans, or DecodeError."""
    path = oracle_dir() / MOZGLUE
    elf = ELFFile(open(path, "rb"))
    sections = {name: elf.get_section_by_name(name) for name in (".ARM.exidx", ".ARM.extab")}
    data = {name: bytearray(sec.data()) for name, sec in sections.items()}
    target = data[".ARM.exidx" if in_index else ".ARM.extab"]
    for position, value in flips:
        target[position % len(target)] = value
    regions = {name: Region.from_bytes(name, sections[name]["sh_addr"], bytes(data[name])) for name in data}
    arch = arches.BY_NAME["arm"]
    try:
        table = ExidxTable(regions[".ARM.exidx"], lambda address: regions[".ARM.extab"])
    except DecodeError:
        return
    for entry in table.entries():
        try:
            unwind = table.describe(entry, lambda address: "__gxx_personality_v0")
        except DecodeError as exc:
            assert exc.section in (".ARM.exidx", ".ARM.extab")
            continue
        if unwind.decoded:
            plan(unwind, arch, entry.function, entry.end or entry.function + 4)


def test_mozglue_equals_pyelftools():
    """A third decoder: pyelftools' EHABI reader (its function offsets count from the section's
    file offset, not its address; its mnemonics stop at the first finish)."""
    path = oracle_dir() / MOZGLUE
    elf = ELFFile(open(path, "rb"))
    section = elf.get_section_by_name(".ARM.exidx")
    shift = section["sh_addr"] - section["sh_offset"]
    (info,) = elf.get_ehabi_infos()
    table, names = file_table(path)
    ours = plugin_entries(table, names)
    assert info.num_entry() == len(ours)
    compared = 0
    for i, mine in enumerate(ours):
        theirs = info.get_entry(i)
        assert theirs.function_offset + shift == mine["function"]
        if mine["kind"] == "cantunwind":
            assert theirs.unwindable is False
            continue
        if mine["index"] is None:
            continue                # generic model: pyelftools does not decode it either
        assert theirs.personality == mine["index"]
        assert bytes(theirs.bytecode_array) == b"".join(raw for raw, _ in mine["ops"])
        items = [str(m).split(";", 1) for m in theirs.mnmemonic_array()]
        want = [(bytes(int(b, 16) for b in raw.split()), meaning_from_text(text, llvm=True))
                for raw, text in items]
        assert want == mine["ops"][:len(want)]
        assert len(want) == len(mine["ops"]) or want[-1][1] == ("finish",)
        compared += 1
    assert compared > 1900


def test_table_sources_decode_from_the_loaded_image():
    """The module found from memory (PT_ARM_EXIDX, extab read from its segment) gives the
    entries readelf lists, and a row per decoded entry."""
    from plugin.modules import ModuleMap
    from plugin.render.exidx_dump import entry_text
    from plugin.strategies.exidx import table_sources
    from plugin.file_targets.elf import FileTarget
    path = _built(BUILDS["thumb-O2"])
    target = FileTarget(str(path))
    (module,) = ModuleMap(target).all()
    assert module.arch.name == "arm" and module.tables[".ARM.exidx"].found_by == "PT_ARM_EXIDX"
    problems = []
    (source,) = table_sources(target, module, None, problems)
    assert not problems
    theirs = parse_readelf(_readelf(path))
    assert [e["start"] for e in source["entries"]] == [e["function"] for e in theirs]
    for entry, want in zip(source["entries"], theirs):
        assert entry["kind"] == want["kind"]
        assert bool(entry["rows_text"]) == (want["ops"] is not None)
    level3 = [e for e in source["entries"] if e["start"] == _symbol(path, "level3")]
    (entry,) = level3
    # pop {r3}; pop {r14}: r3 at sp, lr at sp+4, the caller's sp 8 above.
    assert entry["rows_text"] == ["CFA=sp+8 => r3=[CFA-8] lr=[CFA-4]"]
    assert [i["text"] for i in entry["instructions"]][:2] == ["pop {r3}", "pop {r14}"]
    assert any("pop {r3}" in line for line in entry_text(entry))


def _symbol(path, name):
    elf = ELFFile(open(path, "rb"))
    (sym,) = elf.get_section_by_name(".symtab").get_symbol_by_name(name)
    return sym["st_value"] & ~1
