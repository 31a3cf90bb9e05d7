"""Helpers shared by the SFrame tests (their own tests: tests/unit/test_sframe_dumps.py).

- parse_objdump(): the text of `objdump/readelf --sframe` (binutils 2.40 and
  2.46, including the dejagnu regexp form of the .dump/.d files) as data.
- expected_cells(): what objdump prints for one decoded FRE, so a decode can
  be compared with a dump row by row. It mirrors libsframe's sframe-dump.c,
  quirks included (noted where they matter); it is test code on purpose.
- parse_readobj(): the text of `llvm-readobj --sframe` as data.
- sframe_region(): an ELF file's .sframe as a plugin.memory Region, with
  .rela.sframe applied for ET_REL files (objdump and readobj do the same).
- build_sframe(): an SFrame section of any version, written from a plain
  description, for the cases no tool here writes.
"""

import io
import re
import struct

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from plugin.memory import Region

# -- objdump / readelf --sframe ------------------------------------------

ROW = re.compile(r"^([0-9a-f]{16})\s+(.*)$")
FUNC = re.compile(r"^func idx \[(\d+)\]: pc = 0x([0-9a-f]+), size = (\d+) bytes(.*)$")


def _unregex(line):
    """A line of a dejagnu regexp_diff file as plain text (` +` is one or more spaces)."""
    return line.replace(" +", " ").replace("\\+", "+").replace("\\[", "[").replace("\\]", "]")


def parse_objdump(text, regexp=False):
    """{"header": {...}, "functions": [...]} from objdump/readelf --sframe output.

    header: version (int), flags (list of names, [] for NONE), fixed_ra,
    fixed_fp (None when not printed), num_fdes, num_fres.
    functions: idx, pc, size, attr ("", "S", "F", "SF"), pauth_b, mask,
    rows [(address, cells)] with cells ("RA undefined",) or (cfa, fp, ra).
    """
    header = {"flags": [], "fixed_ra": None, "fixed_fp": None}
    functions = []
    in_flags = False
    for raw in text.splitlines():
        if regexp:
            if raw.startswith("#"):
                continue
            raw = _unregex(raw)
        line = raw.strip()
        if not line:
            in_flags = False
            continue
        if line.startswith("Version:"):
            header["version"] = int(line.rsplit("_", 1)[1])
            continue
        if line.startswith("Flags:"):
            rest = line[len("Flags:"):].strip()
            header["flags"] = re.findall(r"SFRAME_F_\w+", rest)
            in_flags = rest.endswith(",")
            continue
        if in_flags and line.startswith("SFRAME_F_"):
            header["flags"] += re.findall(r"SFRAME_F_\w+", line)
            in_flags = line.endswith(",")
            continue
        in_flags = False
        m = re.match(r"CFA fixed (RA|FP) offset: (-?\d+)$", line)
        if m:
            header["fixed_" + m.group(1).lower()] = int(m.group(2))
            continue
        m = re.match(r"Num (FDEs|FREs): (\d+)$", line)
        if m:
            header["num_" + m.group(1).lower()] = int(m.group(2))
            continue
        m = FUNC.match(line)
        if m:
            tail = m.group(4)
            attr = re.search(r'attr = "(\w*)"', tail)
            functions.append({"idx": int(m.group(1)), "pc": int(m.group(2), 16),
                              "size": int(m.group(3)), "attr": attr.group(1) if attr else "",
                              "pauth_b": "pauth = B key" in tail, "mask": False, "rows": []})
            continue
        if line.startswith("STARTPC") and functions:
            functions[-1]["mask"] = line.startswith("STARTPC[m]")
            continue
        m = ROW.match(line)
        if m and functions:
            cells = tuple(m.group(2).split())
            if cells == ("RA", "undefined"):
                cells = ("RA undefined",)
            functions[-1]["rows"].append((int(m.group(1), 16), cells))
    return {"header": header, "functions": functions}


def _default_cfa_text(fre):
    # sframe-dump.c prints "%s+%d", so a negative offset would read "sp+-8".
    return "%s+%d" % (fre.cfa_base, fre.cfa_offset)


def _slot_text(rule, section):
    if rule.base == "register" and not rule.deref and rule.offset == 0 and rule.control is None:
        return "r%d" % rule.register          # s390x v2 register-encoded slot
    if rule.control is None:
        return "c%+d" % rule.offset
    return rule.text(section.arch)            # flex: "r10+0", "(fp-16)", "c-8"


def expected_cells(section, fde, fre, style):
    """The (CFA, FP, RA) cells objdump prints for this FRE.

    style "2.46" is binutils 2.46 (v2 and v3), "2.40" Debian's 2.40 (v1).
    """
    if fre.outermost:
        return ("RA undefined",)
    fixed_ra = section.fixed_ra_offset != 0
    if fde.fde_type == "flex":
        cfa = fre.cfa.text(section.arch)
        fp = _slot_text(fre.fp, section) if fre.fp is not None else "u"
        if len(fre.words) <= 2:
            ra = "f" if fixed_ra else "u"
        elif fre.ra_padding:
            ra = "U"
        else:
            ra = _slot_text(fre.ra, section)
    else:
        cfa = _default_cfa_text(fre)
        fp = _slot_text(fre.fp, section) if fre.fp is not None else "u"
        if style == "2.40":
            # 2.40 prints 'u' for a fixed RA, and for an untracked RA it
            # leaves the FP cell's text in its buffer (a 2.40 quirk).
            if fixed_ra:
                ra = "u"
            elif fre.ra is not None:
                ra = _slot_text(fre.ra, section)
            else:
                ra = fp
        elif fixed_ra:
            ra = "f"
        elif fre.ra_padding:
            ra = "U"
        elif fre.ra is not None:
            ra = _slot_text(fre.ra, section)
        else:
            ra = "u"
    if fre.ra_mangled:
        ra += "[s]"
    return (cfa, fp, ra)


def flag_names(section):
    names = []
    if section.flags & 0x1:
        names.append("SFRAME_F_FDE_SORTED")
    if section.flags & 0x2 and section.version < 3:
        names.append("SFRAME_F_FRAME_POINTER")
    if section.flags & 0x4 and section.version >= 2:
        names.append("SFRAME_F_FDE_FUNC_START_PCREL")
    return names


def decoded_as_dump(section, style):
    """The decode of `section` in parse_objdump()'s shape, for comparison."""
    header = {"version": section.version, "flags": flag_names(section),
              "num_fdes": section.num_fdes, "num_fres": section.num_fres,
              "fixed_ra": section.fixed_ra_offset or None,
              "fixed_fp": section.fixed_fp_offset or None}
    if style == "2.40":
        header["fixed_ra"] = header["fixed_fp"] = None     # 2.40 does not print them
    functions = []
    for fde in section.fdes:
        attr = ("S" if fde.signal_frame else "") + ("F" if fde.fde_type == "flex" else "")
        rows = []
        for fre in section.fres(fde):
            address = fre.start_offset if fde.pc_type == "mask" else fre.start_address
            rows.append((address, expected_cells(section, fde, fre, style)))
        functions.append({"idx": fde.index, "pc": fde.start, "size": fde.size,
                          "attr": attr, "pauth_b": fde.ra_mangled_key == "B",
                          "mask": fde.pc_type == "mask", "rows": rows})
    return {"header": header, "functions": functions}


def assert_matches_dump(section, expected, style):
    """Compare a decode with a parsed dump, header and every row, with a readable diff."""
    got = decoded_as_dump(section, style)
    exp_header = expected["header"]
    for key in ("version", "flags", "num_fdes", "num_fres", "fixed_ra", "fixed_fp"):
        if key in exp_header:
            assert got["header"][key] == exp_header[key], "header %s" % key
    assert len(expected["functions"]) == exp_header["num_fdes"], "dump parsed incompletely"
    assert sum(len(f["rows"]) for f in expected["functions"]) == exp_header["num_fres"], \
        "dump rows parsed incompletely"
    assert len(got["functions"]) == len(expected["functions"])
    for mine, theirs in zip(got["functions"], expected["functions"]):
        for key in ("idx", "pc", "size", "attr", "pauth_b", "mask"):
            assert mine[key] == theirs[key], "func idx [%d] %s: %r != %r" % (
                theirs["idx"], key, mine[key], theirs[key])
        assert mine["rows"] == theirs["rows"], "func idx [%d] rows" % theirs["idx"]


# -- llvm-readobj --sframe -------------------------------------------------

def _readobj_int(text):
    text = text.split()[0]
    return int(text, 0)


def parse_readobj(text):
    """llvm-readobj --sframe output as {"header": {...}, "fdes": [{..., "fres": [...]}]}."""
    header, fdes = {}, []
    current = header
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("FuncDescEntry ["):
            fdes.append({"fres": []})
            current = fdes[-1]
            continue
        if line.startswith("Frame Row Entry {"):
            fdes[-1]["fres"].append({})
            current = fdes[-1]["fres"][-1]
            continue
        m = re.match(r"Flags \[ \((0x[0-9a-fA-F]+)\)", line)
        if m:
            current["Flags"] = int(m.group(1), 16)
            continue
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        if not value:
            continue
        m = re.search(r"\((0x[0-9a-fA-F]+)\)$", value)
        if m and key not in ("Start Address",):
            current[key] = int(m.group(1), 16)
            if key == "Base Register":
                current["Base Register name"] = value.split()[0]
            continue
        if key in ("Return Address Signed",):
            current[key] = value == "Yes"
            continue
        try:
            current[key] = _readobj_int(value)
        except ValueError:
            current[key] = value
    return {"header": header, "fdes": fdes}


# -- ELF sections -----------------------------------------------------------

# Relocation types whose value is S + A - P (pc-relative) or S + A, with width.
_PCREL32 = {("EM_X86_64", 2), ("EM_S390", 5), ("EM_AARCH64", 261)}
_PCREL64 = {("EM_X86_64", 24), ("EM_S390", 23), ("EM_AARCH64", 260)}
_ABS64 = {("EM_X86_64", 1), ("EM_S390", 22), ("EM_AARCH64", 257)}
_ABS32 = {("EM_X86_64", 10), ("EM_X86_64", 11), ("EM_S390", 4), ("EM_AARCH64", 258)}


def sframe_region(data, name=".sframe", relocate=True):
    """(Region, elf header e_type) for the section `name` of the ELF bytes `data`."""
    elf = ELFFile(io.BytesIO(data))
    section = elf.get_section_by_name(name)
    assert section is not None, "no %s section" % name
    contents = bytearray(section.data())
    address = section["sh_addr"]
    order = "little" if elf.little_endian else "big"
    if relocate and elf["e_type"] == "ET_REL":
        _apply_relocations(elf, section, contents, address, order)
    return Region.from_bytes(name, address, bytes(contents), order), elf["e_type"]


def _apply_relocations(elf, target, contents, address, order):
    index = elf.get_section_index(target.name)
    machine = elf["e_machine"]
    for rel in elf.iter_sections():
        if not isinstance(rel, RelocationSection) or rel["sh_info"] != index:
            continue
        symtab = elf.get_section(rel["sh_link"])
        for r in rel.iter_relocations():
            sym = symtab.get_symbol(r["r_info_sym"])
            s = sym["st_value"]
            if isinstance(sym["st_shndx"], int):
                s += elf.get_section(sym["st_shndx"])["sh_addr"]
            a = r["r_addend"] if r.is_RELA() else 0
            p = address + r["r_offset"]
            kind = (machine, r["r_info_type"])
            if kind in _PCREL32:
                value, size = s + a - p, 4
            elif kind in _PCREL64:
                value, size = s + a - p, 8
            elif kind in _ABS64:
                value, size = s + a, 8
            elif kind in _ABS32:
                value, size = s + a, 4
            else:
                raise AssertionError("relocation type %r not handled by the test" % (kind,))
            value &= (1 << (8 * size)) - 1
            contents[r["r_offset"]:r["r_offset"] + size] = value.to_bytes(size, order)


# -- writing SFrame sections -------------------------------------------------

def fre(start, words, base="sp", word_size=1, mangled=False):
    """One FRE description for build_sframe().

    Each word is written as its low word_size bytes, so signed offsets and
    unsigned flex control words can both be given as plain ints.
    """
    return {"start": start, "words": list(words), "base": base, "word_size": word_size,
            "mangled": mangled}


def fde(start, size, fres, fre_size=1, pc_type="inc", rep_size=0, fde_type="default",
        signal=False, key_b=False):
    return {"start": start, "size": size, "fres": fres, "fre_size": fre_size,
            "pc_type": pc_type, "rep_size": rep_size, "fde_type": fde_type,
            "signal": signal, "key_b": key_b}


_WORD_CODES = {1: 0, 2: 1, 4: 2}
_FRE_TYPES = {1: 0, 2: 1, 4: 2}


def _encode_fre(desc, fre_size, order):
    out = desc["start"].to_bytes(fre_size, order)
    size = desc["word_size"]
    info = (1 if desc["base"] == "sp" else 0) | (len(desc["words"]) << 1) \
        | (_WORD_CODES[size] << 5) | (0x80 if desc["mangled"] else 0)
    out += bytes([info])
    for word in desc["words"]:
        out += (word & ((1 << (8 * size)) - 1)).to_bytes(size, order)
    return out


def build_sframe(version, abi, fdes, flags=0x5, fixed_fp=0, fixed_ra=0, aux=b"",
                 byteorder="little", address=0, num_fres=None, num_fdes=None):
    """SFrame section bytes, laid out as header, aux header, FDEs, FREs.

    fdes: fde() descriptions; each start is an absolute address, written
    relative to the field itself (PCREL flag 0x4, v2/v3) or to the section.
    num_fres/num_fdes override the header counts (for bad-input tests).
    """
    e = "<" if byteorder == "little" else ">"
    header_size = 28 + len(aux)
    fde_size = {1: 17, 2: 20, 3: 16}[version]
    fre_blocks, fre_offsets = [], []
    offset = 0
    for d in fdes:
        block = b""
        info = _FRE_TYPES[d["fre_size"]] | (0x10 if d["pc_type"] == "mask" else 0) \
            | (0x20 if d["key_b"] else 0) | (0x80 if d["signal"] and version == 3 else 0)
        d["_info"] = info
        if version == 3:
            info2 = {"default": 0, "flex": 1}.get(d["fde_type"], d["fde_type"])
            block += struct.pack(e + "HBBB", len(d["fres"]), info, info2, d["rep_size"])
        for f in d["fres"]:
            block += _encode_fre(f, d["fre_size"], byteorder)
        fre_offsets.append(offset)
        fre_blocks.append(block)
        offset += len(block)
    fre_data = b"".join(fre_blocks)
    fdes_bytes = b""
    for i, d in enumerate(fdes):
        field = address + header_size + i * fde_size
        base = field if (flags & 0x4 and version >= 2) else address
        start = d["start"] - base
        if version == 3:
            fdes_bytes += struct.pack(e + "qII", start, d["size"], fre_offsets[i])
        else:
            fdes_bytes += struct.pack(e + "iIIIB", start, d["size"], fre_offsets[i],
                                      len(d["fres"]), d["_info"])
            if version == 2:
                fdes_bytes += struct.pack(e + "BH", d["rep_size"], 0)
    total_fres = sum(len(d["fres"]) for d in fdes)
    header = struct.pack(e + "HBBBbbBIIIII", 0xDEE2, version, flags, abi, fixed_fp, fixed_ra,
                         len(aux), len(fdes) if num_fdes is None else num_fdes,
                         total_fres if num_fres is None else num_fres,
                         len(fre_data), 0, len(fdes_bytes))
    return header + aux + fdes_bytes + fre_data


def region_of(data, address=0, name=".sframe", byteorder="little"):
    return Region.from_bytes(name, address, data, byteorder)
