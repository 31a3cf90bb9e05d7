"""Helpers shared by the Mach-O / compact unwind tests (this file holds no tests).

* parsers for the oracle dumps: `llvm-objdump --macho --unwind-info` and
  GNU `objdump -P compact_unwind`, and for the `.cfi_*` directives clang
  writes into its assembly;
* builders: Mach-O files from tests/fixtures/macho/*.c (clang-16 +
  ld64.lld-16), a minimal Mach-O wrapper around a raw __unwind_info section
  (so llvm-objdump can dump it), and synthetic __unwind_info sections laid
  out from the documented format;
* comparisons of an UnwindInfo with a parsed llvm-objdump dump.
"""

import hashlib
import re
import struct
from pathlib import Path

from support import BUILD, FIXTURES, need_tool, run, tool_output

from plugin.formats import compact_unwind as cu
from plugin.formats import compact_opcodes
from plugin.formats.macho import MachO, fat_slices, open_slice
from plugin.memory import Region

MACHO_FIXTURES = FIXTURES / "macho"

# The shapes fixture and the flag sets it is built with (the test_compact_* files,
# test_macho_target.py).
SOURCE = "unwind_shapes.c"
FLAGS = {
    "O2-fp": ["-O2", "-fno-omit-frame-pointer"],
    "O2-nofp": ["-O2", "-fomit-frame-pointer"],
    "Os-nofp": ["-Os", "-fomit-frame-pointer"],
    "O0": ["-O0"],
}

LLVM_INPUTS = "llvm-project-16.0.4/llvm/test/tools/llvm-objdump/MachO/Inputs/"

# Every Mach-O input with __unwind_info in the corpus.
MACHO_FILES = [
    LLVM_INPUTS + "unwind-info.macho-x86_64",
    LLVM_INPUTS + "unwind-info.macho-arm64",
    LLVM_INPUTS + "unwind-info-excess.macho-x86_64",
    LLVM_INPUTS + "malformed-unwind.macho-x86_64",
    "framehop/fixtures/macos/x86_64/fp/libmozglue.dylib",
    "framehop/fixtures/macos/x86_64/nofp/libmozglue.dylib",
    "framehop/fixtures/macos/x86_64/nofp/firefox-esr-78",
    "framehop/fixtures/macos/x86_64/fp/query-api",
    "framehop/fixtures/macos/arm64/fp/query-api",
    "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib",
    "symbolic/symbolic-testutils/fixtures/macos/crash",
]

# ---------------------------------------------------------------------------
# Opening images
# ---------------------------------------------------------------------------


def file_region(path):
    return Region.from_bytes(Path(path).name, 0, Path(path).read_bytes())


def images(path):
    """[MachO] of a file: one per slice of a fat file, else the file itself."""
    region = file_region(path)
    slices = fat_slices(region)
    if slices:
        return [open_slice(region, s) for s in slices]
    return [MachO(region)]


def unwind_info_of(macho):
    section = macho.section("__TEXT", "__unwind_info")
    assert section is not None, "no __unwind_info"
    return cu.UnwindInfo(macho.section_region(section), macho.arch, macho.image_base)


# ---------------------------------------------------------------------------
# llvm-objdump --macho --unwind-info
# ---------------------------------------------------------------------------

_HEX = r"0x([0-9a-fA-F]+)"


def parse_llvm_unwind_dump(text):
    """One dict per 'Contents of __unwind_info section:' block."""
    dumps = []
    cur = page = None
    part = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Contents of __unwind_info section"):
            cur = dict(header={}, common=[], personalities=[], index=[], lsdas=[], pages=[])
            dumps.append(cur)
            part = "header"
            continue
        if cur is None or not s:
            continue
        m = re.match(r"(Version|Common encodings array section offset|Number of common encodings"
                     r" in array|Personality function array section offset|Number of personality"
                     r" functions in array|Index array section offset|Number of indices in array):"
                     r"\s+" + _HEX + "$", s)
        if m:
            cur["header"][m.group(1)] = int(m.group(2), 16)
            continue
        if s.startswith("Common encodings:"):
            part = "common"
        elif s.startswith("Personality functions:"):
            part = "personalities"
        elif s.startswith("Top level indices:"):
            part = "index"
        elif s.startswith("LSDA descriptors:"):
            part = "lsdas"
        elif s.startswith("Second level indices:"):
            part = "pages"
        elif s.startswith("Second level index["):
            m = re.match(r"Second level index\[(\d+)\]: offset in section=" + _HEX +
                         r", base function offset=" + _HEX, s)
            page = dict(index=int(m.group(1)), offset=int(m.group(2), 16),
                        base=int(m.group(3), 16), encodings={}, entries=[], skipped_kind=None)
            cur["pages"].append(page)
        elif s.startswith("Page encodings:"):
            part = "page-encodings"
        elif s.startswith("Skipping 2nd level page with unknown kind"):
            page["skipped_kind"] = int(s.split()[-1])
        elif part == "common":
            m = re.match(r"encoding\[(\d+)\]: " + _HEX, s)
            cur["common"].append(int(m.group(2), 16))
        elif part == "personalities":
            m = re.match(r"personality\[(\d+)\]: " + _HEX, s)
            cur["personalities"].append(int(m.group(2), 16))
        elif part == "index":
            m = re.match(r"\[(\d+)\]: function offset=" + _HEX + r", 2nd level page offset=" + _HEX +
                         r", LSDA offset=" + _HEX, s)
            cur["index"].append(tuple(int(m.group(i), 16) for i in (2, 3, 4)))
        elif part == "lsdas":
            m = re.match(r"\[(\d+)\]: function offset=" + _HEX + r", LSDA offset=" + _HEX, s)
            cur["lsdas"].append((int(m.group(2), 16), int(m.group(3), 16)))
        elif part in ("pages", "page-encodings"):
            m = re.match(r"encoding\[(\d+)\]: " + _HEX + "$", s)
            if m and part == "page-encodings":
                page["encodings"][int(m.group(1))] = int(m.group(2), 16)
                continue
            m = re.match(r"\[(\d+)\]: function offset=" + _HEX +
                         r", encoding(?:\[(\d+)\])?=" + _HEX, s)
            assert m, "unparsed llvm-objdump line: %r" % line
            index = int(m.group(3)) if m.group(3) is not None else None
            page["entries"].append((int(m.group(2), 16), int(m.group(4), 16), index))
        else:
            raise AssertionError("unparsed llvm-objdump line: %r" % line)
    return dumps


def assert_matches_llvm_dump(ui, dump):
    """Every structural item llvm-objdump printed equals what UnwindInfo decoded."""
    h = dump["header"]
    assert ui.version == h["Version"]
    assert ui.common_encodings_offset == h["Common encodings array section offset"]
    assert len(ui.common_encodings) == h["Number of common encodings in array"]
    assert ui.personalities_offset == h["Personality function array section offset"]
    assert len(ui.personalities) == h["Number of personality functions in array"]
    assert ui.index_offset == h["Index array section offset"]
    assert len(ui.index) == h["Number of indices in array"]
    assert ui.common_encodings == dump["common"]
    assert ui.personalities == dump["personalities"]
    assert [(e.function_offset, e.second_level_page_offset, e.lsda_index_offset)
            for e in ui.index] == dump["index"]
    assert ui.lsdas == dump["lsdas"]

    decoded_pages = {p.index: p for p in ui.pages()}
    skipped = [p for p in dump["pages"] if p["skipped_kind"] is not None]
    assert len(decoded_pages) + len(skipped) == len(dump["pages"])
    for p in skipped:
        assert p["index"] not in decoded_pages
        assert any("unknown kind %d" % p["skipped_kind"] in w for w in ui.warnings)
    for p in dump["pages"]:
        if p["skipped_kind"] is not None:
            continue
        mine = decoded_pages[p["index"]]
        assert mine.offset == p["offset"]
        assert mine.function_offset == p["base"]
        first_local = len(ui.common_encodings)
        assert {first_local + i: e for i, e in enumerate(mine.encodings)} == p["encodings"]
        assert [(e.function_offset, e.encoding, e.encoding_index) for e in mine.entries] \
            == p["entries"]
    return sum(len(p["entries"]) for p in dump["pages"])


def llvm_unwind_dump_of(path, extra=()):
    return parse_llvm_unwind_dump(tool_output("llvm-objdump-16", "--macho", "--unwind-info", *extra, str(path)))


# ---------------------------------------------------------------------------
# GNU objdump -P compact_unwind
# ---------------------------------------------------------------------------

_ENTRY = re.compile(r"^\s+(\d+)\s+0x([0-9a-f]{8})\s+(?:\[\s*(\d+)\]\s+)?0x([0-9a-f]{8})(.*)$")


def parse_objdump_p_dump(text):
    """{'pages': [{'index', 'kind', 'entries': [(fo, eidx, encoding, desc)]}], 'lsdas': [...]}"""
    out = dict(pages=[], lsdas=[], personalities=[], header=None)
    page = None
    in_personalities = False
    for line in text.splitlines():
        m = re.match(r"\s+(\d+) encodings, (\d+) personalities, (\d+) level-1 indexes:", line)
        if m:
            out["header"] = tuple(int(g) for g in m.groups())
            continue
        if line.strip() == "personalities":
            in_personalities = True
            continue
        m = re.match(r"\s+index\s+(\d+): (compressed second level|regular level 2|unhandled second "
                     r"level format \((\d+)\))", line)
        if m:
            kind = {"c": "compressed", "r": "regular", "u": "unknown"}[m.group(2)[0]]
            page = dict(index=int(m.group(1)), kind=kind, entries=[])
            out["pages"].append(page)
            in_personalities = False
            continue
        m = re.match(r"\s+lsda\s+(\d+): function " + _HEX + " lsda " + _HEX, line)
        if m:
            out["lsdas"].append((int(m.group(2), 16), int(m.group(3), 16)))
            continue
        if in_personalities:
            m = re.match(r"\s+(\d+): " + _HEX + "$", line)
            if m:
                out["personalities"].append(int(m.group(2), 16))
                continue
            in_personalities = False
        m = _ENTRY.match(line)
        if m and page is not None:
            eidx = int(m.group(3)) if m.group(3) is not None else None
            page["entries"].append((int(m.group(2), 16), eidx, int(m.group(4), 16),
                                    m.group(5).strip()))
    return out


_X86_64_NAMES = {"rbx", "r12", "r13", "r14", "r15", "rbp"}


def expectation_from_objdump(desc, arch):
    """What GNU objdump's text says about an encoding, in Decoded's terms.

    Returns dict(mode, registers (names, objdump's order), and the mode's
    numbers), with has_lsda and personality_index from the LSDA/PERS(n) tail.
    """
    exp = dict(has_lsda=False, personality_index=0)
    m = re.search(r" PERS\((\d)\)$", desc)
    if m:
        exp["personality_index"] = int(m.group(1))
        desc = desc[:m.start()]
    if desc.endswith(" LSDA") or desc == "LSDA":
        exp["has_lsda"] = True
        desc = desc[:-4].strip()
    if desc == "":
        exp.update(mode="NONE", registers=[])
    elif desc == "[unhandled mode]":
        exp.update(mode="UNKNOWN", registers=[])
    elif desc.startswith("Dwarf offset: "):
        exp.update(mode="DWARF", registers=[], dwarf_offset=int(desc.split()[-1], 16))
    elif desc.startswith("RSP frame") or desc.startswith("ESP frame"):
        # od-macho labels the RBP/EBP frame mode "RSP frame"
        exp.update(mode="RBP_FRAME", registers=[], frame_offset=0)
        m = re.match(r"[RE]SP frame at [RE]BP-(\d+):(.*)$", desc)
        if m:
            exp["frame_offset"] = int(m.group(1))
            # "???" is its name for register field value 7: no register
            exp["registers"] = [r for r in m.group(2).split() if r != "???"]
    elif desc.startswith("frameless size: 0x"):
        m = re.match(r"frameless size: 0x([0-9a-f]+)(.*)$", desc)
        exp.update(mode="STACK_IMMD", stack_size=int(m.group(1), 16),
                   registers=m.group(2).split())
    elif desc.startswith("frameless size at"):
        m = re.match(r"frameless size at 0x([0-9a-f]+) \+ 0x([0-9a-f]+)(.*)$", desc)
        exp.update(mode="STACK_IND", sub_offset=int(m.group(1), 16),
                   stack_adjust=int(m.group(2), 16), registers=m.group(3).split())
    elif desc.startswith("frame") and arch.name == "aarch64":
        m = re.match(r"(frameless|frame)((?: [xd]\d+-[xd]\d+)*)(?: size: (\d+))?$", desc)
        assert m, desc
        pairs = [p.split("-") for p in m.group(2).split()]
        exp.update(mode="FRAME" if m.group(1) == "frame" else "FRAMELESS",
                   registers=[r for pair in pairs for r in pair])
        if m.group(3) is not None:
            exp["stack_size"] = int(m.group(3))
    else:
        raise AssertionError("unknown objdump description %r" % desc)
    return exp


def register_names(decoded, arch):
    return [compact_opcodes.register_name(arch, n) for n in decoded.registers]


# ---------------------------------------------------------------------------
# Mach-O wrappers and builds
# ---------------------------------------------------------------------------


def wrap_unwind_info(raw, cputype, image_base=0x100000000, offset=0x1000):
    """A minimal MH_EXECUTE holding `raw` as __TEXT,__unwind_info at image_base+offset."""
    total = offset + len(raw)
    cmdsize = 72 + 80
    header = struct.pack("<8I", 0xFEEDFACF, cputype, 0, 2, 1, cmdsize, 0, 0)
    segment = struct.pack("<2I16s4Q4I", 0x19, cmdsize, b"__TEXT", image_base, total, 0, total,
                          5, 5, 1, 0)
    section = struct.pack("<16s16s2Q8I", b"__unwind_info", b"__TEXT", image_base + offset,
                          len(raw), offset, 2, 0, 0, 0, 0, 0, 0)
    return (header + segment + section).ljust(offset, b"\0") + raw


TARGETS = {"x86_64": "x86_64-apple-macos11", "arm64": "arm64-apple-macos11"}


def build_macho(source, arch, flags=()):
    """Compile tests/fixtures/macho/SOURCE for `arch` and link a dylib with ld64.lld-16.

    Returns (dylib path, assembly path). Cached by content and flags in tests/.build.
    """
    clang = need_tool("clang-16")
    lld = need_tool("ld64.lld-16")
    src = MACHO_FIXTURES / source
    key = hashlib.sha256(src.read_bytes() + repr((arch, list(flags))).encode()).hexdigest()[:12]
    stem = "%s-%s-%s" % (src.stem, arch, key)
    out, asm, obj = BUILD / (stem + ".dylib"), BUILD / (stem + ".s"), BUILD / (stem + ".o")
    if out.exists() and asm.exists():
        return out, asm
    BUILD.mkdir(parents=True, exist_ok=True)
    common = [clang, "-target", TARGETS[arch], "-fno-stack-protector", "-nostdlib", *flags]
    for cmd in ([*common, "-S", "-o", str(asm), str(src)],
                [*common, "-c", "-o", str(obj), str(src)],
                [lld, "-arch", arch, "-platform_version", "macos", "11.0", "11.0", "-dylib",
                 "-undefined", "dynamic_lookup", "-o", str(out) + ".tmp", str(obj)]):
        result = run(cmd)
        assert result.returncode == 0, "%s\n%s" % (" ".join(cmd), result.stderr)
    Path(str(out) + ".tmp").rename(out)
    return out, asm


def symbols(path):
    """{name without the leading underscore: address} of the defined text symbols."""
    found = {}
    for line in tool_output("llvm-nm-16", "--defined-only", str(path)).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            found[parts[2].lstrip("_")] = int(parts[0], 16)
    return found


def eh_frame_fdes(path):
    """{FDE offset in __eh_frame: (pc_begin, pc_end)} from llvm-dwarfdump-16."""
    fdes = {}
    for line in tool_output("llvm-dwarfdump-16", "--eh-frame", str(path)).splitlines():
        m = re.match(r"([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.\."
                     r"([0-9a-f]+)", line)
        if m:
            fdes[int(m.group(1), 16)] = (int(m.group(2), 16), int(m.group(3), 16))
    return fdes


# ---------------------------------------------------------------------------
# CFI in clang's assembly: the rule in force at each function's first call
# ---------------------------------------------------------------------------

_CALLS = {"x86_64": re.compile(r"^\s+callq?\s"), "arm64": re.compile(r"^\s+blr?\s")}


def _cfi_register(name, arch):
    name = name.strip().lstrip("%")
    if arch.name == "aarch64":
        if name[0] in "wx" and name[1:].isdigit():
            return int(name[1:])
        if name in ("fp", "lr"):
            return {"fp": 29, "lr": 30}[name]
        if name[0] in "bdhsqv" and name[1:].isdigit():
            return compact_opcodes.ARM64_D_BASE + int(name[1:])
    return arch.number_of(name)


def cfi_at_first_call(asm_text, arch, arch_key):
    """{function: (cfa register, cfa offset, {register: offset})} at its first call.

    Starts from the CIE's initial rules (x86_64: CFA=rsp+8, rip at CFA-8;
    arm64: CFA=sp+0) and applies the .cfi_* directives in layout order,
    honouring remember/restore_state, up to the first call instruction.
    Functions that make no call are left out.
    """
    call = _CALLS[arch_key]
    found = {}
    name = state = None
    stack = []
    for line in asm_text.splitlines():
        m = re.match(r"^_([A-Za-z0-9_]+):", line)
        if m:
            name = m.group(1)
            state = None
            continue
        s = line.strip()
        if s.startswith(".cfi_startproc"):
            if arch.name == "x86_64":
                state = [arch.sp, 8, {arch.ra: -8}]
            else:
                state = [arch.sp, 0, {}]
            stack = []
            continue
        if state is None or name in found:
            continue
        if s.startswith(".cfi_endproc"):
            state = None
            continue
        if call.match(line):
            found[name] = (state[0], state[1], dict(state[2]))
            continue
        if not s.startswith(".cfi_"):
            continue
        directive, _, args = s.partition(" ")
        args = [a.strip() for a in args.split(",")] if args else []
        if directive == ".cfi_def_cfa_offset":
            state[1] = int(args[0])
        elif directive == ".cfi_adjust_cfa_offset":
            state[1] += int(args[0])
        elif directive == ".cfi_def_cfa_register":
            state[0] = _cfi_register(args[0], arch)
        elif directive == ".cfi_def_cfa":
            state[0], state[1] = _cfi_register(args[0], arch), int(args[1])
        elif directive == ".cfi_offset":
            state[2][_cfi_register(args[0], arch)] = int(args[1])
        elif directive in (".cfi_restore", ".cfi_same_value"):
            state[2].pop(_cfi_register(args[0], arch), None)
        elif directive == ".cfi_remember_state":
            stack.append((state[0], state[1], dict(state[2])))
        elif directive == ".cfi_restore_state":
            cfa_reg, cfa_off, regs = stack.pop()
            state = [cfa_reg, cfa_off, regs]
        else:
            raise AssertionError("directive not handled by the test: %r" % s)
    return found


# ---------------------------------------------------------------------------
# Synthetic __unwind_info sections, laid out from the documented format
# ---------------------------------------------------------------------------


def build_unwind_info(pages, end_offset, common=(), personalities=(), lsdas=(), version=1):
    """Bytes of an __unwind_info section.

    pages: [(kind, function_offset, entries, local_encodings)] where kind is
      2 (regular: entries = [(function_offset, encoding)]) or 3 (compressed:
      entries = [(offset from the page's function_offset, encoding index)]),
      or any other number for an unknown kind (entries ignored).
    end_offset: the sentinel's function offset.
    lsdas: [(function_offset, lsda_offset)], all hung from the first page.
    """
    header_size = 28
    common_at = header_size
    pers_at = common_at + 4 * len(common)
    index_at = pers_at + 4 * len(personalities)
    lsda_at = index_at + 12 * (len(pages) + 1)
    page_at = lsda_at + 8 * len(lsdas)
    body = b""
    index = b""
    for kind, function_offset, entries, local in pages:
        offset = page_at + len(body)
        if kind == 2:
            page = struct.pack("<IHH", 2, 8, len(entries))
            page += b"".join(struct.pack("<II", fo, enc) for fo, enc in entries)
        elif kind == 3:
            entries_at = 12
            encodings_at = entries_at + 4 * len(entries)
            page = struct.pack("<IHHHH", 3, entries_at, len(entries), encodings_at, len(local))
            page += b"".join(struct.pack("<I", (idx << 24) | off) for off, idx in entries)
            page += b"".join(struct.pack("<I", e) for e in local)
        else:
            page = struct.pack("<IHH", kind, 8, 0)
        body += page
        index += struct.pack("<III", function_offset, offset, lsda_at)
    index += struct.pack("<III", end_offset, 0, lsda_at + 8 * len(lsdas))
    head = struct.pack("<7I", version, common_at, len(common), pers_at, len(personalities),
                       index_at, len(pages) + 1)
    return (head + b"".join(struct.pack("<I", e) for e in common)
            + b"".join(struct.pack("<I", p) for p in personalities) + index
            + b"".join(struct.pack("<II", f, l) for f, l in lsdas) + body)


def encode_permutation(compact_registers):
    """LLVM's encoding (X86AsmBackend) of saved registers, in the encoding's order.

    Digit i is the number of registers not used before it that are smaller,
    packed with the mixed radices of the count.
    """
    count = len(compact_registers)
    digits = []
    for i, reg in enumerate(compact_registers):
        smaller_used = sum(1 for earlier in compact_registers[:i] if earlier < reg)
        digits.append(reg - 1 - smaller_used)
    radices = {1: (1,), 2: (5, 1), 3: (20, 4, 1), 4: (60, 12, 3, 1),
               5: (120, 24, 6, 2, 1), 6: (120, 24, 6, 2, 1)}[count]
    return sum(d * r for d, r in zip(digits, radices))


# ---------------------------------------------------------------------------
# llvm-objdump --private-headers
# ---------------------------------------------------------------------------

def parse_private_headers(text):
    """Header numbers, segments, sections and uuid from llvm-objdump --private-headers."""
    lines = text.splitlines()
    out = dict(segments=[], sections=[], uuid=None)
    for i, line in enumerate(lines):
        if line.strip().startswith("magic cputype"):
            values = lines[i + 1].split()
            out["cputype"], out["cpusubtype"], out["filetype"] = (
                int(values[1]), int(values[2]), int(values[4]))
    current = None
    for line in lines:
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if key == "cmd":
            current = dict(cmd=value)
            if value in ("LC_SEGMENT", "LC_SEGMENT_64"):
                out["segments"].append(current)
        elif line.strip() == "Section":
            current = dict(cmd="section")
            out["sections"].append(current)
        elif current is not None and key in ("segname", "sectname"):
            current[key] = value
        elif current is not None and key in ("vmaddr", "vmsize", "addr", "size"):
            current[key] = int(value, 16)
        elif current is not None and key in ("fileoff", "filesize", "offset", "nsects"):
            current[key] = int(value.split()[0], 0)
        elif key == "uuid":
            out["uuid"] = bytes.fromhex(value.replace("-", ""))
    return out


def private_headers(path):
    return parse_private_headers(tool_output("llvm-objdump-16", "--macho", "--private-headers", "--non-verbose",
                                             str(path)))
