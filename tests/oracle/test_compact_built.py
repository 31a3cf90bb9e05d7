"""Compact unwind of Mach-O files built here, checked against two oracles.

tests/fixtures/macho/unwind_shapes.c is compiled by clang-16 for
x86_64-apple-macos11 and arm64-apple-macos11 and linked by ld64.lld-16
(no SDK: -nostdlib, a dylib with -undefined dynamic_lookup), over a matrix
of flags. For each build:

* the whole __unwind_info must decode to what `llvm-objdump-16 --macho
  --unwind-info` prints for the same file;
* every function's compact rule must be the rule clang's own `.cfi_*`
  directives give at the function's first call (the body, where compact
  unwind is exact), STACK_IND stack sizes included (read from the code);
* every DWARF-mode entry must point at the __eh_frame FDE that
  `llvm-dwarfdump-16 --eh-frame` shows covering that function.
"""

import pytest

from compact_support import (FLAGS, SOURCE, assert_matches_llvm_dump, build_macho, cfi_at_first_call,
                             eh_frame_fdes, images, llvm_unwind_dump_of, symbols, unwind_info_of)

from plugin.formats import compact_unwind as cu

BUILDS = [(arch, flags) for arch in ("x86_64", "arm64") for flags in FLAGS]


def _build(arch, flags):
    return build_macho(SOURCE, arch, FLAGS[flags])


@pytest.mark.parametrize("arch,flags", BUILDS)
def test_structure_matches_llvm_objdump(arch, flags):
    path, _ = _build(arch, flags)
    dumps = llvm_unwind_dump_of(path)
    macho = images(path)[0]
    assert macho.arch.name == {"x86_64": "x86_64", "arm64": "aarch64"}[arch]
    assert len(dumps) == 1
    assert assert_matches_llvm_dump(unwind_info_of(macho), dumps[0]) >= 2     # the linker folds neighbours with one encoding


def _function_rules(arch, flags):
    """{function: (Entry, Decoded)} for every function symbol of a build."""
    path, asm = _build(arch, flags)
    macho = images(path)[0]
    ui = unwind_info_of(macho)
    out = {}
    for name, address in symbols(path).items():
        entry = ui.lookup(address + macho.slide)
        assert entry is not None, name
        # ld folds a function into the entry before it when both have the
        # same encoding, so an entry may start before the symbol.
        assert entry.function_start <= address < entry.function_end, name
        out[name] = (entry, ui.decode(entry))
    return path, asm, macho, ui, out


@pytest.mark.parametrize("arch,flags", BUILDS)
def test_rules_match_clang_cfi_at_first_call(arch, flags):
    path, asm, macho, ui, rules = _function_rules(arch, flags)
    cfi = cfi_at_first_call(asm.read_text(), macho.arch, arch)
    compared = 0
    for name, (entry, decoded) in rules.items():
        if name not in cfi or decoded.mode in ("DWARF", "NONE"):
            continue
        cfa_reg, cfa_off, saved = cfi[name]
        row = ui.row(entry, read_code=macho.read_code)
        assert (row.cfa.register, row.cfa.offset) == (cfa_reg, cfa_off), (name, decoded.text)
        mine = {n: r.offset for n, r in row.registers.items() if r.kind == "offset"}
        assert mine == saved, (name, decoded.text)
        if decoded.mode == "FRAMELESS":
            assert row.registers[macho.arch.ra].kind == "same"
        compared += 1
    assert compared >= 1     # arm64 -fomit-frame-pointer builds are mostly DWARF


@pytest.mark.parametrize("arch,flags", BUILDS)
def test_dwarf_entries_point_at_the_function_fde(arch, flags):
    path, _, macho, ui, rules = _function_rules(arch, flags)
    fdes = eh_frame_fdes(path)
    symbols_of = symbols(path)
    for name, (entry, decoded) in rules.items():
        if decoded.mode != "DWARF":
            continue
        assert decoded.dwarf_offset in fdes, name
        begin, end = fdes[decoded.dwarf_offset]
        assert begin <= symbols_of[name] < end, name
        assert cu.to_row(decoded, entry.function_start, macho.arch) is None


def test_the_builds_cover_every_mode():
    """The matrix exercises each mode of both architectures, STACK_IND and
    saved d8-d15 pairs included, and the hand-written DWARF-only function."""
    seen = {"x86_64": set(), "arm64": set()}
    for arch, flags in BUILDS:
        _, _, macho, _, rules = _function_rules(arch, flags)
        for name, (_, decoded) in rules.items():
            seen[arch].add(decoded.mode)
            if any(n >= 64 for n in decoded.registers):
                seen[arch].add("d-pairs")
            if decoded.mode == "STACK_IND" and decoded.registers:
                seen[arch].add("STACK_IND-saved")
            if name == "dwarf_only":
                assert decoded.mode == "DWARF"
    assert {"RBP_FRAME", "STACK_IMMD", "STACK_IND", "STACK_IND-saved", "DWARF"} <= seen["x86_64"]
    assert {"FRAME", "FRAMELESS", "DWARF", "d-pairs"} <= seen["arm64"]
