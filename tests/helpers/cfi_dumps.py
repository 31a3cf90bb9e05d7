"""Reading the oracles' text: readelf --debug-dump=frames-interp and
llvm-dwarfdump --eh-frame --debug-frame, and rendering our Rows in the same
terms, so test_cfi_oracle.py can compare them row for row.

Both tools' rows are turned into `(address, key)` pairs where the key is
hashable and holds exactly what that tool prints; our rows are turned into
the same keys by `readelf_key` / `llvm_key`. What each tool cannot show is
dropped from *both* sides, and each such normalization is explained where
it is done.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from plugin.arch import Arch
from plugin.model.rules import RuleKind

# A MIPS32 Arch for the LLVM mipsel input. plugin/arch has no MIPS (on
# purpose); the decoder needs only the address size and byte order.
MIPS = Arch(name="mips", address_size=4, byteorder="little",
            registers={n: "reg%d" % n for n in range(32)}, sp=29, fp=30, ra=31, pc=31,
            callee_saved=tuple(range(16, 24)) + (30,), elf_machine=8)

# --- register names as each tool prints them -----------------------------------------

_X86_64 = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
           "r12", "r13", "r14", "r15", "rip"]
_I386 = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"]
_MIPS_LLVM = ["ZERO", "AT", "V0", "V1", "A0", "A1", "A2", "A3", "T0", "T1", "T2", "T3", "T4",
              "T5", "T6", "T7", "S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7", "T8", "T9",
              "K0", "K1", "GP", "SP", "FP", "RA"]


def readelf_names(arch):
    """name -> DWARF number, as binutils' readelf prints registers."""
    if arch.name == "x86_64":
        return {n: i for i, n in enumerate(_X86_64)}
    if arch.name == "i386":
        return {n: i for i, n in enumerate(_I386)}
    if arch.name == "aarch64":
        names = {"x%d" % i: i for i in range(31)}
        names["sp"] = 31
        return names
    return {}                                   # MIPS: readelf prints r<N>


def llvm_names(arch):
    """name -> DWARF number, as llvm-dwarfdump 16 prints registers."""
    if arch.name == "x86_64":
        return {n.upper(): i for i, n in enumerate(_X86_64)}
    if arch.name == "i386":
        return {n.upper(): i for i, n in enumerate(_I386)}
    if arch.name == "aarch64":
        # LLVM 16 names the aarch64 DWARF registers by their 32-bit views.
        names = {"W%d" % i: i for i in range(31)}
        names.update({"X%d" % i: i for i in range(31)})
        names.update({"WSP": 31, "SP": 31, "FP": 29, "LR": 30})
        return names
    if arch.name == "mips":
        return {n + "_64": i for i, n in enumerate(_MIPS_LLVM)}
    return {}


def register_number(name, names):
    if name in names:
        return names[name]
    match = re.fullmatch(r"(?:r|reg)(\d+)", name)
    if match:
        return int(match.group(1))
    raise AssertionError("register name %r is not known to the test; extend the table" % name)


# --- parsed entries -------------------------------------------------------------------

@dataclass
class ToolEntry:
    offset: int
    kind: str                   # "CIE" or "FDE"
    cie: int = None
    start: int = None
    end: int = None
    ra: int = None
    rows: list = field(default_factory=list)   # readelf: (address, cfa, {column: cell})
                                                # llvm: (address or None, text after "CFA=")


_READELF_SECTION = re.compile(r"^Contents of the (\S+) section:")
_ENTRY = re.compile(r"^([0-9a-f]{8,16}) ([0-9a-f]{8,16}) ([0-9a-f]{8,16}) (CIE|FDE)\b(.*)$")
_READELF_PC = re.compile(r"cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)")
_READELF_RA = re.compile(r"ra=(\d+)")


def _entry_lines(text, section_re, section_name, sections):
    """Walk a dump of CIEs and FDEs, filling sections {section name: {entry offset: ToolEntry}}.

    Yields (entry, rest, None) for the header line of each entry (rest: the text after
    "CIE"/"FDE") and (entry, None, line) for each line of its body; a section header
    (section_re, named by section_name(match)) or a ZERO terminator ends the entry."""
    entries, entry = None, None
    for line in text.splitlines():
        match = section_re.match(line)
        if match:
            entries = sections.setdefault(section_name(match), {})
            entry = None
            continue
        match = _ENTRY.match(line)
        if match:
            offset = int(match.group(1), 16)
            entry = entries[offset] = ToolEntry(offset, match.group(4))
            yield entry, match.group(5), None
        elif "ZERO terminator" in line:
            entry = None
        elif entry is not None:
            yield entry, None, line


def parse_readelf(text):
    """{section name: {entry offset: ToolEntry}} from frames-interp output."""
    sections, columns = {}, None
    for entry, rest, line in _entry_lines(text, _READELF_SECTION, lambda m: m.group(1), sections):
        if rest is not None:
            columns = None
            if entry.kind == "CIE":
                entry.ra = int(_READELF_RA.search(rest).group(1))
            else:
                pc = _READELF_PC.search(rest)
                entry.cie, entry.start, entry.end = (int(g, 16) for g in pc.groups())
        elif not line.strip():
            continue
        elif line.startswith("   LOC"):
            columns = line.split()[2:]
        else:
            # A DW_CFA_register cell reads "r9 (r9)" (number, then name): one cell.
            cells = re.findall(r"r\d+ \([^)]*\)|\S+", line)
            assert columns is not None and len(cells) == len(columns) + 2, line
            entry.rows.append((int(cells[0], 16), cells[1], dict(zip(columns, cells[2:]))))
    return sections


_LLVM_SECTION = re.compile(r"^\.(eh_frame|debug_frame) contents:")
_LLVM_PC = re.compile(r"cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.\.([0-9a-f]+)")
_LLVM_RA = re.compile(r"^\s+Return address column: (\d+)")
_LLVM_ROW = re.compile(r"^  (?:0x([0-9a-f]+): )?CFA=(.*)$")


def parse_llvm(text):
    """{section name: {entry offset: ToolEntry}} from llvm-dwarfdump output."""
    sections = {}
    for entry, rest, line in _entry_lines(text, _LLVM_SECTION, lambda m: "." + m.group(1), sections):
        if rest is not None:
            if entry.kind == "FDE":
                entry.cie, entry.start, entry.end = (int(g, 16) for g in _LLVM_PC.search(rest).groups())
            continue
        match = _LLVM_RA.match(line)
        if match:
            entry.ra = int(match.group(1))
            continue
        match = _LLVM_ROW.match(line)
        if match:
            address = int(match.group(1), 16) if match.group(1) else None
            entry.rows.append((address, match.group(2)))
    return sections


# --- keys: what a tool shows of one row ------------------------------------------------

def _signed(text):
    return int(text) if text else 0


def readelf_row_key(cfa_cell, cells, ra_column, names):
    """Key of one readelf row. "u" (undefined *or* no rule: readelf prints
    both the same way) is dropped; readelf_key drops RuleKind.UNDEFINED likewise."""
    if cfa_cell == "exp":
        cfa = ("expr",)
    else:
        match = re.fullmatch(r"(.+?)([+-]\d+)", cfa_cell)
        cfa = ("reg", register_number(match.group(1), names), int(match.group(2)))
    rules = {}
    for column, cell in cells.items():
        number = ra_column if column == "ra" else register_number(column, names)
        if cell == "u":
            continue
        if cell == "s":
            rules[number] = ("same",)
        elif cell == "exp":
            rules[number] = ("expression",)
        elif cell == "vexp":
            rules[number] = ("val_expression",)
        elif re.fullmatch(r"c[+-]\d+", cell):
            rules[number] = ("offset", int(cell[1:]))
        elif re.fullmatch(r"v[+-]\d+", cell):
            rules[number] = ("val_offset", int(cell[1:]))
        else:
            match = re.fullmatch(r"r(\d+) \(.*\)", cell)
            number_of_source = int(match.group(1)) if match else register_number(cell, names)
            rules[number] = ("register", number_of_source)
    return cfa, frozenset(rules.items())


def readelf_key(row):
    """Our Row in readelf's terms (expressions only by kind: readelf's
    interp mode prints "exp", not the bytes; llvm_key checks the bytes)."""
    if row.cfa is None:
        cfa = ("undefined",)
    elif row.cfa.kind == "expression":
        cfa = ("expr",)
    else:
        cfa = ("reg", row.cfa.register, row.cfa.offset)
    rules = {}
    for number, rule in row.registers.items():
        if rule.kind == RuleKind.UNDEFINED:
            continue
        if rule.kind == RuleKind.SAME:
            rules[number] = ("same",)
        elif rule.kind == RuleKind.OFFSET:
            rules[number] = ("offset", rule.offset)
        elif rule.kind == RuleKind.VAL_OFFSET:
            rules[number] = ("val_offset", rule.offset)
        elif rule.kind == RuleKind.REGISTER:
            rules[number] = ("register", rule.register)
        elif rule.kind == RuleKind.EXPRESSION:
            rules[number] = ("expression",)
        elif rule.kind == RuleKind.VAL_EXPRESSION:
            rules[number] = ("val_expression",)
    return cfa, frozenset(rules.items())


def _split_llvm_row(text):
    """'RSP+8: RBP=[CFA-16], RIP=[CFA-8]' -> ('RSP+8', ['RBP=[CFA-16]', ...]).
    Expressions contain ', ' too, so registers are split where ', NAME=' starts."""
    cfa, _, rest = text.partition(": ")
    return cfa, (re.split(r", (?=[A-Za-z0-9_]+=)", rest) if rest else [])


def _llvm_location(text, names):
    match = re.fullmatch(r"([A-Za-z][A-Za-z0-9_]*)([+-]\d+)?", text)
    if match and not text.startswith("DW_OP"):
        return ("reg", register_number(match.group(1), names), _signed(match.group(2)))
    return None


def llvm_row_key(text, names, aarch64=False):
    cfa_text, items = _split_llvm_row(text)
    cfa = _llvm_location(cfa_text, names) or ("expr", cfa_text)
    if cfa_text == "undefined":
        cfa = ("undefined",)
    rules, ra_signed = {}, False
    for item in items:
        name, _, value = item.partition("=")
        number = register_number(name, names)
        if aarch64 and number == 34 and re.fullmatch(r"(0x)?[01]", value):
            # LLVM keeps the aarch64 RA-signing state as a constant in
            # pseudo register 34; we keep it in Row.ra_signed.
            ra_signed = value.endswith("1")
            continue
        if value in ("undefined", "same"):
            rules[number] = (value,)
        elif re.fullmatch(r"\[CFA([+-]\d+)?\]", value):
            rules[number] = ("offset", _signed(value[4:-1]))
        elif re.fullmatch(r"CFA([+-]\d+)?", value):
            rules[number] = ("val_offset", _signed(value[3:]))
        elif value.startswith("[DW_OP") and value.endswith("]"):
            rules[number] = ("expression", value[1:-1])
        elif value.startswith("DW_OP"):
            rules[number] = ("val_expression", value)
        else:
            location = _llvm_location(value, names)
            assert location is not None and location[2] == 0, item
            rules[number] = ("register", location[1])
    return cfa, frozenset(rules.items()), ra_signed


def llvm_key(row, arch, names):
    by_number = {}
    for name, number in names.items():
        by_number.setdefault(number, name)
    if row.cfa is None:
        cfa = ("undefined",)
    elif row.cfa.kind == "expression":
        cfa = ("expr", llvm_expression(row.cfa.expression, by_number))
    else:
        cfa = ("reg", row.cfa.register, row.cfa.offset)
    rules = {}
    for number, rule in row.registers.items():
        if rule.kind in (RuleKind.UNDEFINED, RuleKind.SAME):
            rules[number] = (rule.kind,)
        elif rule.kind in (RuleKind.OFFSET, RuleKind.VAL_OFFSET):
            rules[number] = (rule.kind, rule.offset)
        elif rule.kind == RuleKind.REGISTER:
            rules[number] = ("register", rule.register)
        else:
            rules[number] = (rule.kind, llvm_expression(rule.expression, by_number))
    return cfa, frozenset(rules.items()), row.ra_signed


_SIMPLE_OPS = {0x06: "deref", 0x12: "dup", 0x13: "drop", 0x14: "over", 0x16: "swap",
               0x17: "rot", 0x19: "abs", 0x1A: "and", 0x1B: "div", 0x1C: "minus",
               0x1D: "mod", 0x1E: "mul", 0x1F: "neg", 0x20: "not", 0x21: "or",
               0x22: "plus", 0x24: "shl", 0x25: "shr", 0x26: "shra", 0x27: "xor",
               0x29: "eq", 0x2A: "ge", 0x2B: "gt", 0x2C: "le", 0x2D: "lt", 0x2E: "ne",
               0x96: "nop"}


def llvm_expression(data, by_number):
    """Our expression bytes as llvm-dwarfdump 16 prints them, for the
    operations that occur in the oracle inputs; others fail loudly."""
    out, i = [], 0
    while i < len(data):
        op = data[i]
        i += 1
        if 0x30 <= op <= 0x4F:
            out.append("DW_OP_lit%d" % (op - 0x30))
        elif 0x70 <= op <= 0x8F:
            value, shift = 0, 0
            while True:
                byte = data[i]
                i += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            if value >> (shift - 1) & 1:
                value -= 1 << shift
            register = op - 0x70
            out.append("DW_OP_breg%d %s%+d" % (register, by_number.get(register, "reg%d" % register),
                                               value))
        elif op in _SIMPLE_OPS:
            out.append("DW_OP_" + _SIMPLE_OPS[op])
        else:
            raise AssertionError("DW_OP 0x%02x: teach llvm_expression how llvm prints it" % op)
    return ", ".join(out)


def inside(rows, start, end):
    """Drop rows that start at or after the FDE's end (keeping the one at
    its start, for empty FDEs). They cover no address the FDE describes, so
    they cannot matter to unwinding; execute() stops interpreting once the
    location reaches the end, while the tools print such rows (gcc's MIPS
    epilogue CFI, for one, advances to the end address itself)."""
    return [(address, key) for address, key in rows if address < end or address == start]


def collapse(rows):
    """Normalize a row list the same way for every side: a row followed by
    another at the same address covers nothing (keep the later one), and a
    row equal to the one before it adds nothing (keep the earlier one).
    readelf prints a row at every advance whether or not anything changed;
    our rows and LLVM's follow the advances too."""
    out = []
    for address, key in rows:
        if out and out[-1][0] == address:
            out.pop()
        if out and out[-1][1] == key:
            continue
        out.append((address, key))
    return out


def readelf_fde_ranges(path, section=".eh_frame"):
    """Sorted (start, end) of every FDE of `section` as `readelf --debug-dump=frames` prints them."""
    from support import need_tool, run
    out = run([need_tool("readelf"), "--debug-dump=frames", str(path)]).stdout
    ranges, current = [], None
    for line in out.splitlines():
        header = re.match(r"Contents of the (\S+) section", line)
        if header:
            current = header.group(1).rstrip(":")
        match = re.search(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", line)
        if match and current == section:
            ranges.append((int(match.group(1), 16), int(match.group(2), 16)))
    return sorted(ranges)
