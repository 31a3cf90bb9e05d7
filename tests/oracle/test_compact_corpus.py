"""__unwind_info decoding checked against the oracle corpus (shared/oracles).

Oracles, per MANIFEST sections 1.6-1.8 and 2:
* derived `llvm-objdump --macho --unwind-info` dumps: the structure (header,
  common and page encodings, personalities, index, LSDAs, every page entry);
* derived GNU `objdump -P compact_unwind` dumps: an independent decode of
  every encoding (mode, registers, sizes, DWARF offsets, LSDA/PERS flags);
* derived/x86_64-STACK_IND-resolution.txt: the stack size of every x86_64
  STACK_IND function, from the `subq` in its code;
* framehop's x86_64 dumps (full rules; MANIFEST says trustworthy) and arm64
  dumps (CFA, FP and LR only: their pair slots are known to be wrong);
* symbolic's Breakpad snapshot for macos/crash (frameless x86_64 rules; its
  STACK_IND rules are placeholders, known wrong, and are not compared).
The raw __unwind_info sections (query-api arm64, rustup) are wrapped in a
minimal Mach-O at test time and dumped with llvm-objdump-16.
"""

import re

import pytest

from support import need_tool, oracle_dir, run
from compact_support import (LLVM_INPUTS, MACHO_FILES, assert_matches_llvm_dump, expectation_from_objdump,
                             images, llvm_unwind_dump_of, parse_llvm_unwind_dump, parse_objdump_p_dump,
                             register_names, unwind_info_of, wrap_unwind_info)

from plugin import arch as arches
from plugin.errors import DecodeError
from plugin.formats import compact_unwind as cu
from plugin.formats.macho import CPU_TYPE_ARM64
from plugin.memory import Region

RAW_SECTIONS = [
    "framehop/fixtures/macos/arm64/fp/query-api.__unwind_info",
    "framehop/fixtures/macos/arm64/nofp/rustup.__unwind_info",
]
RAW_IMAGE_BASE = 0x100000000
# The fat dylib has no objdump -P dump (od-macho does not read fat files).
OBJDUMP_P_FILES = [f for f in MACHO_FILES if "fat" not in f]


def corpus():
    return oracle_dir()


def _name(path):
    return path.split("/")[-1]


# ---------------------------------------------------------------------------
# Structure: llvm-objdump
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", MACHO_FILES, ids=_name)
def test_structure_matches_derived_llvm_objdump(path):
    root = corpus()
    dump_path = root / "derived/llvm-objdump-16.0.6" / (path + ".unwind-info.txt")
    dumps = parse_llvm_unwind_dump(dump_path.read_text())
    machos = images(root / path)
    assert len(dumps) == len(machos)          # one block per slice of the fat file
    total = 0
    for macho, dump in zip(machos, dumps):
        total += assert_matches_llvm_dump(unwind_info_of(macho), dump)
    assert total > 0 or "malformed" in path


def test_raw_query_api_section_is_the_file_section_and_matches_its_dump():
    root = corpus()
    raw = (root / RAW_SECTIONS[0]).read_bytes()
    full = images(root / "framehop/fixtures/macos/arm64/fp/query-api")[0]
    section = full.section("__TEXT", "__unwind_info")
    assert full.region.read(section.offset, section.size) == raw
    ui = cu.UnwindInfo(Region.from_bytes("query-api.__unwind_info", 0, raw),
                       arches.BY_NAME["aarch64"], RAW_IMAGE_BASE)
    dump = parse_llvm_unwind_dump(
        (root / "derived/llvm-objdump-16.0.6/framehop/fixtures/macos/arm64/fp/"
         "query-api.unwind-info.txt").read_text())[0]
    assert assert_matches_llvm_dump(ui, dump) == 2562


@pytest.mark.parametrize("path", RAW_SECTIONS, ids=_name)
def test_raw_section_matches_llvm_objdump_of_a_wrapper(path, tmp_path):
    """llvm-objdump-16 run here on the raw section wrapped in a minimal Mach-O."""
    raw = (corpus() / path).read_bytes()
    wrapped = tmp_path / "wrapped"
    wrapped.write_bytes(wrap_unwind_info(raw, CPU_TYPE_ARM64, RAW_IMAGE_BASE))
    dumps = llvm_unwind_dump_of(wrapped)
    assert len(dumps) == 1
    ui = cu.UnwindInfo(Region.from_bytes(_name(path), 0, raw), arches.BY_NAME["aarch64"],
                       RAW_IMAGE_BASE)
    assert assert_matches_llvm_dump(ui, dumps[0]) > 500


def test_llvm_upstream_check_lines():
    """The upstream CHECK lines of unwind-info-{x86_64,arm64}.test, by hand."""
    root = corpus()
    x86 = unwind_info_of(images(root / LLVM_INPUTS / "unwind-info.macho-x86_64")[0])
    assert x86.common_encodings == [0x01000000, 0x51000000]
    assert x86.personalities == [0x1018]
    assert [(e.function_offset, e.second_level_page_offset, e.lsda_index_offset)
            for e in x86.index] == [(0xD70, 0x50, 0x40), (0xEAB, 0, 0x50)]
    assert x86.lsdas == [(0xDB0, 0xF0C), (0xE20, 0xF34)]
    page = x86.pages()[0]
    assert page.kind == "compressed" and page.encodings == (0x01234567,)
    assert [(e.function_offset, e.encoding_index, e.encoding) for e in page.entries] == [
        (0xD70, 0, 0x01000000), (0xDB0, 1, 0x51000000), (0xE20, 2, 0x01234567)]
    base = x86.image_base
    entry = x86.lookup(base + 0xDB0 + 5)
    assert (entry.function_start, entry.function_end) == (base + 0xDB0, base + 0xE20)
    assert entry.lsda == base + 0xF0C and entry.personality == base + 0x1018
    assert x86.lookup(base + 0xEAB) is None and x86.lookup(base + 0xD6F) is None
    assert x86.lookup(base + 0xEAA).function_end == base + 0xEAB

    arm = unwind_info_of(images(root / LLVM_INPUTS / "unwind-info.macho-arm64")[0])
    page = arm.pages()[0]
    assert page.kind == "regular"
    assert [(e.function_offset, e.encoding) for e in page.entries] == [
        (0x7D90, 0x78563412), (0x7E10, 0x21436587)]
    # The regular page starts at 0x7d64 but its first entry at 0x7d90.
    assert arm.lookup(arm.image_base + 0x7D70) is None
    # 0x78563412 has the LSDA bit and personality index 3 of 1 (unresolvable);
    # 0x21436587 has no LSDA bit, personality index 2 (also unresolvable).
    first = arm.lookup(arm.image_base + 0x7D90)
    assert first.lsda == arm.image_base + 0x7F44 and first.personality is None
    second = arm.lookup(arm.image_base + 0x7E10)
    assert second.lsda is None and second.personality is None


def test_excess_has_127_common_and_17_page_encodings():
    ui = unwind_info_of(images(corpus() / LLVM_INPUTS / "unwind-info-excess.macho-x86_64")[0])
    assert len(ui.common_encodings) == 127
    page = ui.pages()[0]
    assert len(page.encodings) == 17
    assert page.encodings[0] == 0x01010003 and page.encodings[16] == 0x01020011
    indices = {e.encoding_index for e in page.entries}
    assert max(indices) == 143


def test_malformed_page_kind_4_is_skipped_with_a_warning_and_lookup_fails():
    ui = unwind_info_of(images(corpus() / LLVM_INPUTS / "malformed-unwind.macho-x86_64")[0])
    assert ui.pages() == []
    assert ui.warnings == ["skipping second-level page 0 at 0x40 with unknown kind 4"]
    assert ui.entries() == []
    with pytest.raises(DecodeError, match="unknown kind 4"):
        ui.page(0)
    with pytest.raises(DecodeError, match="unknown kind 4"):
        ui.lookup(ui.image_base + 0xF00)
    assert ui.lookup(ui.image_base + 0xF49) is None     # past the sentinel
    assert ui.lsdas == [(0xF00, 0xF78)]


# ---------------------------------------------------------------------------
# Semantics: GNU objdump -P compact_unwind
# ---------------------------------------------------------------------------

def _assert_decoded_like_objdump(decoded, expected, arch, where):
    assert decoded.mode == expected["mode"], where
    assert register_names(decoded, arch) == expected["registers"], where
    assert decoded.has_lsda == expected["has_lsda"], where
    assert decoded.personality_index == expected["personality_index"], where
    for key in ("stack_size", "sub_offset", "stack_adjust", "frame_offset", "dwarf_offset"):
        if key in expected:
            assert getattr(decoded, key) == expected[key], (where, key)


@pytest.mark.parametrize("path", OBJDUMP_P_FILES, ids=_name)
def test_encodings_match_derived_objdump_p(path):
    root = corpus()
    dump = parse_objdump_p_dump((root / "derived/binutils-2.46.0-built/objdump-P-compact_unwind"
                                 / (path + ".P-compact_unwind.txt")).read_text())
    macho = images(root / path)[0]
    ui = unwind_info_of(macho)
    common, personalities, index_count = dump["header"]
    assert (len(ui.common_encodings), len(ui.personalities), len(ui.index)) == \
        (common, personalities, index_count)
    assert ui.personalities == dump["personalities"]
    assert ui.lsdas == dump["lsdas"]
    checked = 0
    for page in dump["pages"]:
        if page["kind"] == "unknown":
            with pytest.raises(DecodeError):
                ui.page(page["index"])
            continue
        mine = ui.page(page["index"])
        assert mine.kind == page["kind"]
        assert len(mine.entries) == len(page["entries"])
        for raw, (fo, eidx, encoding, desc) in zip(mine.entries, page["entries"]):
            where = "%s 0x%x 0x%08x %s" % (_name(path), fo, encoding, desc)
            assert (raw.function_offset, raw.encoding_index, raw.encoding) == (fo, eidx, encoding)
            expected = expectation_from_objdump(desc, macho.arch)
            _assert_decoded_like_objdump(cu.decode_encoding(encoding, macho.arch), expected,
                                         macho.arch, where)
            checked += 1
    assert checked == sum(len(p["entries"]) for p in dump["pages"])


# ---------------------------------------------------------------------------
# STACK_IND: stack sizes from the code
# ---------------------------------------------------------------------------

def _stack_ind_rows():
    text = (corpus() / "derived/x86_64-STACK_IND-resolution.txt").read_text()
    rows = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cols = [c.strip() for c in line.split("|")]
        rows.append(dict(file=cols[0], func=int(cols[1], 16), encoding=int(cols[2], 16),
                         sub_offset=int(cols[3], 16), adjust=int(cols[4].split()[0]),
                         regs=[r for r in cols[5].split() if r not in ("LSDA",)
                               and not r.startswith("PERS")],
                         imm32=int(cols[6], 16), size=int(cols[7])))
    return rows


def test_stack_ind_sizes_are_read_from_the_code():
    rows = _stack_ind_rows()
    assert len(rows) == 14
    arch = arches.BY_NAME["x86_64"]
    opened = {}
    for row in rows:
        macho = opened.get(row["file"])
        if macho is None:
            macho = opened[row["file"]] = images(corpus() / row["file"])[0]
        ui = unwind_info_of(macho)
        entry = ui.lookup(macho.image_base + row["func"])
        assert entry.function_start == macho.image_base + row["func"]
        assert entry.encoding == row["encoding"]
        decoded = ui.decode(entry)
        assert decoded.mode == "STACK_IND"
        assert decoded.sub_offset == row["sub_offset"]
        assert decoded.stack_adjust == 8 * row["adjust"]
        assert register_names(decoded, arch) == row["regs"]
        assert cu.stack_ind_size(decoded, entry.function_start, arch, macho.read_code) == row["size"]
        result = ui.row(entry, read_code=macho.read_code)
        assert (result.cfa.register, result.cfa.offset) == (arch.sp, row["size"])
        assert result.registers[arch.ra].offset == -8
    # every STACK_IND entry of these files is in the table
    for name, macho in opened.items():
        ui = unwind_info_of(macho)
        found = {start - macho.image_base for start, _, enc in ui.entries()
                 if cu.decode_encoding(enc, arch).mode == "STACK_IND"}
        assert found == {r["func"] for r in rows if r["file"] == name}


def test_stack_ind_without_code_is_a_decode_error():
    decoded = cu.decode_encoding(0x030DF800, arches.BY_NAME["x86_64"])
    with pytest.raises(DecodeError, match="needs the function's code"):
        cu.to_row(decoded, 0x1000, arches.BY_NAME["x86_64"])


# ---------------------------------------------------------------------------
# Semantics: framehop's and symbolic's rule dumps
# ---------------------------------------------------------------------------

_RULE = re.compile(r"reg(\d+)=\[CFA([+-]\d+)?\]")


def _row_as_dict(row):
    return {n: r.offset for n, r in row.registers.items() if r.kind == "offset"}


@pytest.mark.parametrize("path", ["framehop/fixtures/macos/x86_64/fp/libmozglue",
                                  "framehop/fixtures/macos/x86_64/nofp/libmozglue"],
                         ids=lambda p: p.split("/")[-2])
def test_x86_64_rules_match_framehop_dump(path):
    root = corpus()
    macho = images(root / (path + ".dylib"))[0]
    ui = unwind_info_of(macho)
    arch = macho.arch
    counts = dict(rules=0, dwarf=0, indirect=0)
    for line in (root / (path + "-unwindinfodump.txt")).read_text().splitlines():
        m = re.match(r"\s+0x([0-9a-f]+): (.*)$", line)
        if not m:
            continue
        address = macho.image_base + int(m.group(1), 16)
        entry = ui.lookup(address)
        assert entry.function_start == address
        decoded = ui.decode(entry)
        text = m.group(2)
        if text.startswith("(check eh_frame FDE"):
            assert decoded.dwarf_offset == int(text.split()[-1].rstrip(")"), 16)
            counts["dwarf"] += 1
        elif text == "frameless indirect":
            assert decoded.mode == "STACK_IND"
            counts["indirect"] += 1
        else:
            cfa = re.match(r"CFA=reg(\d+)\+(\d+)", text)
            row = cu.to_row(decoded, entry.function_start, arch)
            assert (row.cfa.register, row.cfa.offset) == (int(cfa.group(1)), int(cfa.group(2)))
            expected = {int(n): int(off) for n, off in _RULE.findall(text)}
            assert _row_as_dict(row) == expected, line
            counts["rules"] += 1
    assert counts["rules"] > 500
    if "nofp" in path:
        assert counts["dwarf"] == 179 and counts["indirect"] == 7


def test_arm64_query_api_cfa_fp_lr_match_framehop_dump():
    """Only CFA, x29 and x30 (and which registers are saved) are compared:
    the MANIFEST found this dump's pair slots wrong."""
    root = corpus()
    base = "framehop/fixtures/macos/arm64/fp/"
    macho = images(root / (base + "query-api"))[0]
    ui = unwind_info_of(macho)
    checked = 0
    for line in (root / (base + "query-api-unwindinfodump.txt")).read_text().splitlines():
        m = re.match(r"\s+0x([0-9a-f]+): (.*)$", line)
        if not m:
            continue
        entry = ui.lookup(macho.image_base + int(m.group(1), 16))
        assert entry.function_start == macho.image_base + int(m.group(1), 16)
        decoded = ui.decode(entry)
        text = m.group(2)
        if text.startswith("(check eh_frame FDE"):
            assert decoded.dwarf_offset == int(text.split()[-1].rstrip(")"), 16)
            continue
        row = cu.to_row(decoded, entry.function_start, macho.arch)
        cfa = re.match(r"CFA=reg(\d+)(?:\+(\d+))?", text)
        assert (row.cfa.register, row.cfa.offset) == (int(cfa.group(1)), int(cfa.group(2) or 0))
        theirs = {int(n): int(off or 0) for n, off in _RULE.findall(text)}
        mine = _row_as_dict(row)
        for reg in (29, 30):
            assert mine.get(reg) == theirs.get(reg), line
        checked += 1
        if decoded.mode != "FRAME":
            continue        # the dump lists no saved pairs for frameless functions
        # The dump names every d pair reg14/reg15 (not DWARF's 72..79): compare
        # the x registers by number and only whether d registers are saved.
        assert {n for n in mine if n < 32} == {n for n in theirs if 19 <= n <= 30}, line
        assert any(n >= 64 for n in mine) == any(n < 19 for n in theirs), line
    assert checked > 2500


def test_arm64_rustup_entries_match_framehop_dump():
    """rustup's dump (older format: CFA is the frame's base register value,
    `reg31=reg29+16` the caller's sp). Compared: every entry's address, page
    kinds and sizes, DWARF offsets, no-info entries, and the caller's sp."""
    root = corpus()
    raw = (root / RAW_SECTIONS[1]).read_bytes()
    arch = arches.BY_NAME["aarch64"]
    ui = cu.UnwindInfo(Region.from_bytes("rustup.__unwind_info", 0, raw), arch, RAW_IMAGE_BASE)
    lines = (root / "framehop/fixtures/macos/arm64/nofp/rustup-unwindinfodump.txt").read_text()
    pages = ui.pages()
    headers = re.findall(r"^0x([0-9a-f]+): (Compressed|Regular) page with (\d+) entries"
                         r"(?: and (\d+) local opcodes)?", lines, re.M)
    assert [(p.function_offset, p.kind, len(p.entries), len(p.encodings)) for p in pages] == [
        (int(a, 16), k.lower(), int(n), int(local or 0)) for a, k, n, local in headers]
    counted = 0
    for line in lines.splitlines():
        m = re.match(r"\s+0x([0-9a-f]+): (.*)$", line)
        if not m:
            continue
        entry = ui.lookup(RAW_IMAGE_BASE + int(m.group(1), 16))
        assert entry.function_start == RAW_IMAGE_BASE + int(m.group(1), 16)
        decoded = ui.decode(entry)
        text = m.group(2)
        counted += 1
        if text.startswith("(check eh_frame FDE"):
            assert decoded.dwarf_offset == int(text.split()[-1].rstrip(")"), 16), line
        elif text == "(uncovered)":
            assert decoded.mode == "NONE", line
        elif text.startswith("CFA=reg29:"):
            assert decoded.mode == "FRAME", line
            assert "reg31=reg29+16" in text and "reg30=[CFA+8]" in text and "reg29=[CFA]" in text
        else:
            m2 = re.match(r"CFA=reg31(?:\+(\d+))?(?:: reg31=reg31\+(\d+))?", text)
            assert m2, line
            assert decoded.mode == "FRAMELESS", line
            caller_sp = int(m2.group(1) or m2.group(2) or 0)
            assert decoded.stack_size == caller_sp, line
    assert counted == len(ui.entries()) + _zero_length_entries(ui)


def _zero_length_entries(ui):
    return sum(len(p.entries) for p in ui.pages()) - len(ui.entries())


def test_x86_64_frameless_rules_match_symbolic_snapshot():
    root = corpus()
    macho = images(root / "symbolic/symbolic-testutils/fixtures/macos/crash")[0]
    ui = unwind_info_of(macho)
    arch = macho.arch
    names = {"$rbx": 3, "$rbp": 6, "$r12": 12, "$r13": 13, "$r14": 14, "$r15": 15, ".ra": 16}
    snapshot = (root / "symbolic/symbolic-cfi/tests/snapshots/test_cfi__cfi_macho.snap").read_text()
    compared = 0
    for line in snapshot.splitlines():
        m = re.match(r"STACK CFI INIT ([0-9a-f]+) ([0-9a-f]+) \.cfa: \$rsp (\d+) \+ (.*)$", line)
        if not m:
            continue
        start = macho.image_base + int(m.group(1), 16)
        entry = ui.lookup(start)
        decoded = ui.decode(entry)
        if decoded.mode != "STACK_IMMD":
            continue        # DWARF entries come from __eh_frame; STACK_IND are placeholders
        assert entry.function_start == start
        assert entry.function_end - entry.function_start == int(m.group(2), 16)
        row = cu.to_row(decoded, start, arch)
        assert row.cfa.offset == int(m.group(3))
        theirs = {names[r]: int(off) for r, off in re.findall(r"(\S+): \.cfa (-?\d+) \+ \^",
                                                                   m.group(4))}
        assert _row_as_dict(row) == theirs, line
        compared += 1
    assert compared == 92


# ---------------------------------------------------------------------------
# Lookups agree with the entry list everywhere
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", MACHO_FILES, ids=_name)
def test_lookup_agrees_with_entries(path):
    for macho in images(corpus() / path):
        ui = unwind_info_of(macho)
        entries = ui.entries()
        for start, end, encoding in entries:
            for pc in {start, (start + end) // 2, end - 1}:
                entry = ui.lookup(pc)
                assert (entry.function_start, entry.function_end, entry.encoding) == \
                    (start, end, encoding)
        for (_, end, _), (start, _, _) in zip(entries, entries[1:]):
            assert end <= start


# ---------------------------------------------------------------------------
# arm64 FRAMELESS with saved pairs: the prologue's stores say where they are
# ---------------------------------------------------------------------------

_STP = re.compile(r"\tstp\t([xd]\d+), ([xd]\d+), \[sp(?:, #(-?0x[0-9a-f]+))?\](!?)")
_SUB_SP = re.compile(r"\tsub\tsp, sp, #(0x[0-9a-f]+)(?:, lsl #12)?")


def _prologue_slots(disassembly):
    """({register: offset from the CFA}, stack size) from the first stores.

    The CFA is sp at entry. `stp a, b, [sp, #-n]!` moves sp down first;
    `stp a, b, [sp, #n]` stores at sp+n; `sub sp, sp, #n` moves sp down.
    Only the first store of each callee-saved register counts.
    """
    sp = 0
    slots = {}
    for line in disassembly.splitlines()[:40]:
        m = _SUB_SP.search(line)
        if m:
            sp -= int(m.group(1), 16) << (12 if "lsl #12" in line else 0)
            continue
        m = _STP.search(line)
        if not m:
            continue
        offset = int(m.group(3) or "0", 16)
        if m.group(4):
            sp += offset
            offset = 0
        for n, name in enumerate((m.group(1), m.group(2))):
            number = int(name[1:]) + (64 if name[0] == "d" else 0)
            if (19 <= number <= 28 or 72 <= number <= 79) and number not in slots:
                slots[number] = sp + offset + 8 * n
    return slots, -sp


def test_arm64_frameless_pairs_match_the_prologue_stores(tmp_path):
    """libunwind reads the first frameless pair at the CFA itself; the code
    stores it at CFA-8. Checked on every arm64 FRAMELESS entry with pairs."""
    tool = need_tool("llvm-objdump-16")
    root = corpus()
    checked = 0
    for path in ("framehop/fixtures/macos/arm64/fp/query-api",
                 "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib"):
        for n, macho in enumerate(images(root / path)):
            if macho.arch.name != "aarch64":
                continue
            thin = tmp_path / ("thin%d" % n)
            section = macho.section("__TEXT", "__text")
            thin.write_bytes(macho.region.read(0, macho.region.size))
            ui = unwind_info_of(macho)
            for start, end, encoding in ui.entries():
                decoded = cu.decode_encoding(encoding, macho.arch)
                if decoded.mode != "FRAMELESS" or not decoded.registers:
                    continue
                out = run([tool, "-d", "--no-show-raw-insn", "--start-address=0x%x" % start,
                           "--stop-address=0x%x" % min(end, start + 64, section.addr + section.size),
                           str(thin)])
                assert out.returncode == 0, out.stderr
                slots, size = _prologue_slots(out.stdout)
                assert slots == dict(decoded.saved), (path, hex(start), decoded.text)
                assert size == decoded.stack_size, (path, hex(start), decoded.text)
                checked += 1
    assert checked >= 7
