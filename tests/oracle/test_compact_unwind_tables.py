"""`python -m plugin tables` on Mach-O files, checked against tools the project did not write.

For every Mach-O of the corpus with __unwind_info (MANIFEST 1.6-1.8; each
slice of the fat dylib through `--arch`) and every unwind_shapes.c build of
test_compact_built, the command's JSON must give:

* per function, the entries `llvm-objdump-16 --macho --unwind-info` lists
  (its function offsets and encodings; each entry runs to the next one or
  the page's end, zero-length ones dropped, pages of unknown kind skipped);
  the corpus uses the derived dumps of MANIFEST section 2, built files run
  the tool;
* for every DWARF-mode entry, the rows `llvm-dwarfdump-16 --eh-frame`
  prints for the FDE at the opcode's offset, row for row (the parsers and
  row keys of test_cfi_tools), and the FDE's range;
* for every x86_64 STACK_IND function, the stack size of
  derived/x86_64-STACK_IND-resolution.txt (imm32 of the disassembled
  `subq`, plus the adjust).

The `--address` form and the text form are checked on built files, and
bad input (truncated files, a damaged __unwind_info, a wrong `--arch`)
gives one line on stderr and exit status 2, or a "problem:" line, never a
traceback.
"""

import json
import re
import subprocess
import sys

import pytest

from cfi_dumps import collapse, inside, llvm_names, llvm_row_key, parse_llvm
from compact_support import (FLAGS, MACHO_FILES, SOURCE, build_macho, llvm_unwind_dump_of,
                             parse_llvm_unwind_dump)
from support import ROOT, need_tool, oracle_dir, run

from plugin import arch as arches

SLICE_ARCHES = ("x86_64", "arm64")          # the fat dylib's slices, in fat-header order
ARCH_OF = {"x86_64": "x86_64", "arm64": "aarch64"}


def plugin(*args):
    return subprocess.run([sys.executable, "-m", "plugin", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def tables_json(path, *extra):
    result = plugin("tables", path, "--json", *extra)
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    # Exit status 1 says some entries were bad (each a problem); 0 that none was.
    bad = [p for p in data["problems"] if not p.startswith("no module contains")]
    assert result.returncode == (1 if bad else 0), (result.returncode, result.stderr, data["problems"])
    return data


def _name(path):
    return path.split("/")[-1]


# ---------------------------------------------------------------------------
# What the oracles say
# ---------------------------------------------------------------------------

def llvm_entries(dump):
    """[(start offset, end offset, encoding)] of one llvm-objdump block."""
    ends = [entry[0] for entry in dump["index"]]
    out = []
    for page in dump["pages"]:
        if page["skipped_kind"] is not None:
            continue
        page_end = ends[page["index"] + 1]
        items = page["entries"]
        for n, (offset, encoding, _) in enumerate(items):
            end = items[n + 1][0] if n + 1 < len(items) else page_end
            if end > offset:
                out.append((offset, end, encoding))
    return out


def json_row_key(row, arch):
    """A row of our JSON in the terms of test_cfi_tools.llvm_row_key."""
    cfa = row["cfa"]
    if cfa["kind"] == "register":
        cfa_key = ("reg", arch.number_of(cfa["register"]), cfa["offset"])
    else:
        cfa_key = ("expr", cfa["expression"])
    rules = {}
    for name, rule in row["registers"].items():
        kind = rule["kind"]
        if kind in ("undefined", "same"):
            value = (kind,)
        elif kind in ("offset", "val_offset"):
            value = (kind, rule["offset"])
        elif kind == "register":
            value = ("register", arch.number_of(rule["register"]))
        else:
            raise AssertionError("expression rules do not occur in these files: %r" % rule)
        rules[arch.number_of(name)] = value
    return cfa_key, frozenset(rules.items()), bool(row.get("ra_signed"))


def dwarfdump_fdes(path, arch_name=None):
    """{FDE offset: ToolEntry} of __eh_frame from llvm-dwarfdump-16 --eh-frame."""
    argv = [need_tool("llvm-dwarfdump-16"), "--eh-frame", str(path)]
    if arch_name:
        argv.insert(2, "--arch=%s" % arch_name)
    result = run(argv)
    assert result.returncode == 0, result.stderr
    return parse_llvm(result.stdout).get(".eh_frame", {})


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------

def check_against_tools(data, dump, fdes, arch):
    """Our JSON for one image vs llvm-objdump's block and llvm-dwarfdump's FDEs.
    Returns (entries compared, DWARF-mode entries compared)."""
    compact = [s for s in data["sources"] if s["kind"] == "compact"]
    assert len(compact) == 1, [s["kind"] for s in data["sources"]]
    source = compact[0]
    base = source["image_base"]
    ours = [(e["start"] - base, e["end"] - base, e["encoding"]) for e in source["entries"]]
    assert ours == llvm_entries(dump)
    names = dict(llvm_names(arch))
    if arch.name == "aarch64":
        # LLVM 16 prints the FP/SIMD registers (DWARF 64..95) by their 8-bit views.
        names.update({"B%d" % i: 64 + i for i in range(32)})
    dwarf = 0
    for entry in source["entries"]:
        assert entry["encoding_hex"] == "0x%08x" % entry["encoding"]
        if entry["mode"] != "DWARF":
            assert "dwarf" not in entry
            if entry["row"] is not None:
                assert entry["rows"] == [entry["row"]]
            continue
        offset = int(re.search(r"__eh_frame\+0x([0-9a-f]+)", entry["text"]).group(1), 16)
        assert entry["dwarf"]["fde_offset"] == offset, entry
        tool = fdes[offset]
        assert tool.kind == "FDE"
        assert (entry["dwarf"]["start"], entry["dwarf"]["end"]) == (tool.start, tool.end)
        assert tool.start <= entry["start"] < tool.end
        expected = inside([(a, llvm_row_key(text, names, arch.name == "aarch64")) for a, text in tool.rows],
                          tool.start, tool.end)
        got = [(row["address"], json_row_key(row, arch)) for row in entry["rows"]]
        assert collapse(got) == collapse(expected), "FDE at +0x%x" % offset
        dwarf += 1
    return len(source["entries"]), dwarf


@pytest.mark.parametrize("path", MACHO_FILES, ids=_name)
def test_corpus_files_match_llvm_objdump_and_dwarfdump(path):
    root = oracle_dir()
    full = root / path
    dumps = parse_llvm_unwind_dump(
        (root / "derived/llvm-objdump-16.0.6" / (path + ".unwind-info.txt")).read_text())
    if len(dumps) == 1:
        runs = [(None, dumps[0], images_arch(full))]
    else:
        runs = [(name, dump, arches.BY_NAME[ARCH_OF[name]]) for name, dump in zip(SLICE_ARCHES, dumps)]
    for arch_name, dump, arch in runs:
        data = tables_json(full, *(("--arch", arch_name) if arch_name else ()))
        fdes = dwarfdump_fdes(full, arch_name)
        entries, dwarf = check_against_tools(data, dump, fdes, arch)
        assert entries > 0 or "malformed" in path
        if "malformed" in path:
            assert any("unknown kind 4" in p for p in data["problems"])
        else:
            assert data["problems"] == []
        # __eh_frame, when there is one, is listed as CFI too, with the same FDEs
        cfi = [s for s in data["sources"] if s["kind"] == "cfi"]
        assert [s["section"] for s in cfi] == (["__eh_frame"] if fdes else [])
        if cfi:
            assert sorted(e["fde_offset"] for e in cfi[0]["entries"]) == \
                sorted(o for o, t in fdes.items() if t.kind == "FDE")


def images_arch(path):
    from compact_support import images
    return images(path)[0].arch


BUILDS = [(arch, flags) for arch in ("x86_64", "arm64") for flags in FLAGS]


@pytest.mark.parametrize("arch,flags", BUILDS)
def test_built_files_match_llvm_objdump_and_dwarfdump(arch, flags):
    path, _ = build_macho(SOURCE, arch, FLAGS[flags])
    (dump,) = llvm_unwind_dump_of(path)
    data = tables_json(path)
    entries, dwarf = check_against_tools(data, dump, dwarfdump_fdes(path), arches.BY_NAME[ARCH_OF[arch]])
    assert entries >= 2 and dwarf >= 1          # dwarf_only is always a DWARF escape
    assert data["problems"] == []


def test_corpus_dwarf_and_stack_ind_entries_were_compared():
    """The corpus has DWARF-mode entries with FDEs (x86_64 and arm64), and its
    STACK_IND stack sizes are those of the derived resolution file."""
    root = oracle_dir()
    resolution = root / "derived/x86_64-STACK_IND-resolution.txt"
    expected = {}
    for line in resolution.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cells = [c.strip() for c in line.split("|")]
        expected.setdefault(cells[0], {})[int(cells[1], 16)] = int(cells[7])
    assert sum(len(v) for v in expected.values()) == 14
    for path, sizes in expected.items():
        data = tables_json(root / path)
        (source,) = [s for s in data["sources"] if s["kind"] == "compact"]
        base = source["image_base"]
        got = {e["start"] - base: e["stack_size"] for e in source["entries"] if e["mode"] == "STACK_IND"}
        assert got == sizes, path
        for entry in source["entries"]:
            if entry["mode"] == "STACK_IND":
                assert entry["row"]["cfa"] == {"kind": "register", "register": "rsp",
                                               "offset": entry["stack_size"]}
    counted = {}
    for path in ("symbolic/symbolic-testutils/fixtures/macos/crash",
                 "framehop/fixtures/macos/x86_64/nofp/libmozglue.dylib",
                 "framehop/fixtures/macos/arm64/fp/query-api"):
        data = tables_json(root / path)
        (source,) = [s for s in data["sources"] if s["kind"] == "compact"]
        counted[path] = sum(1 for e in source["entries"] if e["mode"] == "DWARF" and e["rows"])
    assert all(n > 0 for n in counted.values()), counted


# ---------------------------------------------------------------------------
# --address and text
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_address_gives_the_covering_entry_and_row(arch):
    path, _ = build_macho(SOURCE, arch, FLAGS["O2-fp"])
    whole = tables_json(path)
    (source,) = [s for s in whole["sources"] if s["kind"] == "compact"]
    dwarf = next(e for e in source["entries"] if e["mode"] == "DWARF")
    body = next(e for e in source["entries"] if e["mode"] in ("RBP_FRAME", "FRAME"))
    # an address inside the DWARF entry, past its first row: one row, the FDE's row there
    second = dwarf["rows"][1]["address"]
    data = tables_json(path, "--address", hex(second))
    (hit,) = [s for s in data["sources"] if s["kind"] == "compact"]
    assert [e["start"] for e in hit["entries"]] == [dwarf["start"]]
    assert hit["entries"][0]["rows"] == [dwarf["rows"][1]]
    (cfi,) = [s for s in data["sources"] if s["kind"] == "cfi"]
    assert cfi["section"] == "__eh_frame" and cfi["entries"][0]["rows"] == [dwarf["rows"][1]]
    # an address in a compact-mode function: its one row, and no CFI (no FDE covers it)
    data = tables_json(path, "--address", hex(body["start"] + 4))
    assert [s["kind"] for s in data["sources"]] == ["compact"]
    assert data["sources"][0]["entries"][0]["rows"] == [body["row"]]
    # outside every module
    data = tables_json(path, "--address", "0x7fff00000000")
    assert data["sources"] == [] and data["problems"] == ["no module contains 0x7fff00000000"]


def test_text_form():
    path, _ = build_macho(SOURCE, "x86_64", FLAGS["O2-nofp"])
    result = plugin("tables", path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.match(r"\S+: __unwind_info COMPACT at 0x[0-9a-f]+ \(\d+ entries\)$", lines[0])
    assert any(re.match(r"  \[0x[0-9a-f]+, 0x[0-9a-f]+\) compact 0x04[0-9a-f]{6} \(page 0\): "
                        r"dwarf: FDE at __eh_frame\+0x[0-9a-f]+$", l) for l in lines)
    assert any(re.match(r"    -> __eh_frame FDE at \+0x[0-9a-f]+, CIE at \+0x0, ", l) for l in lines)
    assert any("frameless: CFA=rsp+(imm32 at function+0x" in l for l in lines)
    assert any(l.startswith("__") is False and "__eh_frame CFI at 0x" in l for l in lines)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def _cut(src, dst, size):
    dst.write_bytes(src.read_bytes()[:size])
    return dst


def assert_one_line_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m plugin: error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_truncated_mach_o_files(tmp_path):
    root = oracle_dir()
    crash = root / "symbolic/symbolic-testutils/fixtures/macos/crash"
    fat = root / "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib"
    cases = [
        (_cut(crash, tmp_path / "magic-only", 4), "read of"),
        (_cut(crash, tmp_path / "header", 32), "load commands"),
        (_cut(crash, tmp_path / "half-commands", 600), "load command"),
        (_cut(crash, tmp_path / "no-linkedit", 0x10000), "truncated"),
        (_cut(fat, tmp_path / "fat-header", 30), "fat"),
        (_cut(fat, tmp_path / "fat-slice", 5000), "runs past the end"),
    ]
    for path, word in cases:
        for extra in ((), ("--json",)):
            assert_one_line_error(plugin("tables", path, *extra), "cannot open", str(path), word)


def test_wrong_arch_options(tmp_path):
    root = oracle_dir()
    fat = root / "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib"
    thin = root / "framehop/fixtures/macos/arm64/fp/query-api"
    assert_one_line_error(plugin("tables", fat, "--arch", "ppc"), "unknown architecture 'ppc'")
    assert_one_line_error(plugin("tables", fat, "--arch", "i386"), "no i386 slice (it has x86_64, arm64)")
    assert_one_line_error(plugin("tables", thin, "--arch", "x86_64"), "is a thin arm64 file, not x86_64")
    elf = tmp_path / "elf"
    elf.write_bytes(open(sys.executable, "rb").read(1 << 16))
    assert_one_line_error(plugin("tables", elf, "--arch", "x86_64"), "universal Mach-O")


def test_damaged_unwind_info_is_a_problem_not_a_crash(tmp_path):
    """A bad __unwind_info version: the file opens, the table is reported as a
    problem, and the __eh_frame CFI is still listed."""
    path, _ = build_macho(SOURCE, "x86_64", FLAGS["O2-nofp"])
    data = bytearray(path.read_bytes())
    from compact_support import images
    section = images(path)[0].section("__TEXT", "__unwind_info")
    data[section.offset:section.offset + 4] = (7).to_bytes(4, "little")
    damaged = tmp_path / "damaged.dylib"
    damaged.write_bytes(bytes(data))
    result = plugin("tables", damaged, "--json")
    assert result.returncode == 1, result.stderr         # some entries were bad
    out = json.loads(result.stdout)
    assert [s["kind"] for s in out["sources"]] == ["cfi"]
    assert any("unknown __unwind_info version 7" in p for p in out["problems"]), out["problems"]
    text = plugin("tables", damaged)
    assert text.returncode == 1 and "problem: damaged.dylib __unwind_info" in text.stdout
