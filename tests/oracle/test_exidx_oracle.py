"""ARM EHABI decoding equals binutils `readelf -u` and `llvm-readobj-16 --unwind`.

Inputs: the corpus' Android `release-libmozglue.so` (its two stored dumps,
made by readelf 2.40 and llvm-readelf 16, and the tools run here) and the
ehabi.cpp fixture built with arm-linux-gnueabihf-g++ in Arm and Thumb-2,
-O0 and -O2, dynamic and static (the static one brings glibc's and
libstdc++'s tables: VFP pops, __gxx/__gcc_personality_v0 entries whose
opcodes readelf decodes).

llvm-readobj does not decode the opcodes of a generic-model entry, so for
those only the personality routine is compared with it.
"""

import pytest

from exidx_dumps import file_table, parse_llvm, parse_readelf, plugin_entries
from support import build, need_tool, oracle_dir, run

MOZGLUE = "framehop/fixtures/android/arm/release-libmozglue.so"
READELF_DUMP = "derived/binutils-readelf-2.40/" + MOZGLUE + ".readelf-u.txt"
LLVM_DUMP = "derived/llvm-readelf-16.0.6/" + MOZGLUE + ".llvm-readelf-unwind.txt"

BUILDS = {
    "arm-O0": ["-O0", "-marm"],
    "arm-O2": ["-O2", "-marm"],
    "thumb-O0": ["-O0", "-mthumb"],
    "thumb-O2": ["-O2", "-mthumb"],
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


def test_static_build_decodes_gcc_personality_opcodes():
    path = _built(BUILDS["thumb-O2-static"])
    table, names = file_table(path)
    ours = plugin_entries(table, names)
    generic = [e for e in ours if e["personality"] is not None]
    assert generic and all(e["ops"] for e in generic)
    used = {m[0] for e in ours for _, m in (e["ops"] or ())}
    assert {"vsp-add", "pop", "finish", "vsp-from-register", "pop-vfp"} <= used
