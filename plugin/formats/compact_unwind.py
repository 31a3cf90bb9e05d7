"""Apple compact unwind: the __TEXT,__unwind_info section and its opcodes.

The section is a two-level table (reference: the compact unwind write-up in
shared/seeds, constants from libunwind's compact_unwind_encoding.h):

  header        version, common encodings, personalities, first-level index
  first level   (function offset, second-level page offset, LSDA index offset)
                per page, the last entry a sentinel holding the end offset
  second level  "regular" pages of (function offset, encoding) pairs, or
                "compressed" pages of u32 entries: 24-bit offset from the
                page's first-level function offset + 8-bit encoding index
                into the common encodings, then into the page's own ones
  LSDA array    (function offset, LSDA offset), between the first and the
                last first-level entry's LSDA index offsets

All function offsets are relative to the image base (the run-time address
of __TEXT). Each entry covers its function offset up to the next entry's
(or the page's end), with one 32-bit encoding for the whole range.

decode_encoding() turns an encoding into its mode and saved registers and
to_row() into the plugin.model.rules.Row that holds in the function's body (after
the prologue, before the epilogue): compact unwind has no rows for prologues.

Corner cases (the write-up's section 5), as decided here:
  * entries of zero length (two entries at one offset) are dropped by
    lookup() and entries(); pages() still lists them as stored;
  * x86 register field value 7 means "no register"; a frameless register
    count of 7 is clamped to 6;
  * unknown section version -> DecodeError when the UnwindInfo is built;
  * a second-level page of unknown kind (llvm's malformed-unwind test has
    kind 4): pages() and entries() skip it and record a warning in
    `warnings`, as llvm-objdump does ("Skipping 2nd level page with unknown
    kind 4"), so the rest of the table stays usable; page(i) and a lookup()
    of an address inside that page raise DecodeError, because the address
    is covered by the table but its rule cannot be known;
  * offsets outside the section, encoding indices past the common and page
    tables, first-level entries out of order and second-level entries out of
    order or outside their page -> DecodeError;
  * a first-level entry (other than the sentinel) without a second-level
    page covers no function: an empty page;
  * a personality index past the personality array, or an LSDA flag with no
    LSDA descriptor, resolves to None (the unwind rule does not need them);
  * unknown modes decode to mode "UNKNOWN" and give no row.
"""

import bisect
from dataclasses import dataclass
from typing import NamedTuple

from plugin.errors import DecodeError, MemoryReadError
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

SECTION = "__unwind_info"
UNWIND_SECTION_VERSION = 1
SECOND_LEVEL_REGULAR = 2
SECOND_LEVEL_COMPRESSED = 3
PAGE_KINDS = {SECOND_LEVEL_REGULAR: "regular", SECOND_LEVEL_COMPRESSED: "compressed"}

HEADER_SIZE = 28
INDEX_ENTRY_SIZE = 12
LSDA_ENTRY_SIZE = 8
REGULAR_ENTRY_SIZE = 8

# Bits shared by every architecture.
UNWIND_IS_NOT_FUNCTION_START = 0x80000000
UNWIND_HAS_LSDA = 0x40000000
UNWIND_PERSONALITY_MASK = 0x30000000
UNWIND_MODE_MASK = 0x0F000000

# x86_64 and i386 (same layout; i386 has 4-byte slots and other registers).
X86_MODE_NAMES = {0: "NONE", 1: "RBP_FRAME", 2: "STACK_IMMD", 3: "STACK_IND", 4: "DWARF"}
X86_FRAME_REGISTERS = 0x00007FFF
X86_FRAME_OFFSET = 0x00FF0000
X86_FRAMELESS_STACK_SIZE = 0x00FF0000
X86_FRAMELESS_STACK_ADJUST = 0x0000E000
X86_FRAMELESS_REG_COUNT = 0x00001C00
X86_FRAMELESS_REG_PERMUTATION = 0x000003FF
DWARF_SECTION_OFFSET = 0x00FFFFFF

# Compact register numbers 1..6 -> register names of plugin.arch.
X86_64_COMPACT_REGISTERS = {1: "rbx", 2: "r12", 3: "r13", 4: "r14", 5: "r15", 6: "rbp"}
I386_COMPACT_REGISTERS = {1: "ebx", 2: "ecx", 3: "edx", 4: "edi", 5: "esi", 6: "ebp"}

# arm64
ARM64_MODE_NAMES = {0: "NONE", 2: "FRAMELESS", 3: "DWARF", 4: "FRAME"}
ARM64_FRAMELESS_STACK_SIZE = 0x00FFF000
# (bit, first register, second register) in the order the pairs are stored.
ARM64_PAIRS = (
    (0x001, "x19", "x20"), (0x002, "x21", "x22"), (0x004, "x23", "x24"),
    (0x008, "x25", "x26"), (0x010, "x27", "x28"),
    (0x100, "d8", "d9"), (0x200, "d10", "d11"), (0x400, "d12", "d13"), (0x800, "d14", "d15"),
)
# plugin.arch.aarch64 names the FP/SIMD registers v0..v31 (DWARF 64..95);
# d8..d15 are the low halves of v8..v15.
_ARM64_D_BASE = 64

# Mixed radices of the Lehmer code of the saved-register permutation, by count.
_PERMUTATION_RADICES = {
    1: (1,), 2: (5, 1), 3: (20, 4, 1), 4: (60, 12, 3, 1),
    5: (120, 24, 6, 2, 1), 6: (120, 24, 6, 2, 1),
}


# ---------------------------------------------------------------------------
# Opcode decoding
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Decoded:
    """One compact encoding, decoded for one architecture.

    registers   DWARF numbers of the saved registers in the order the encoding
                lists them: x86 frame slots from the lowest address up, x86
                frameless permutation order (registers[0] lowest), arm64 pairs
                from x19/x20 (highest address) down.
    saved       ((DWARF number, offset from the CFA), ...) in that order.
    stack_size  bytes from the stack pointer to the CFA (STACK_IMMD, FRAMELESS).
    sub_offset  STACK_IND: byte offset from the function start of the 32-bit
                immediate of the prologue's `sub $imm32, %rsp`;
    stack_adjust  STACK_IND: bytes added to that immediate.
    frame_offset  RBP_FRAME: bytes below the frame pointer where the saved
                registers start.
    dwarf_offset  DWARF: offset of the FDE in __eh_frame.
    """
    encoding: int
    arch: str
    mode: str
    registers: tuple = ()
    saved: tuple = ()
    stack_size: int = None
    sub_offset: int = None
    stack_adjust: int = None
    frame_offset: int = None
    dwarf_offset: int = None
    has_lsda: bool = False
    personality_index: int = 0
    function_start: bool = True
    text: str = ""


def decode_encoding(encoding, arch):
    """Decoded for a 32-bit compact encoding on `arch` (a plugin.arch Arch).

    Raises DecodeError only for an x86 frameless register permutation that
    names no register (a corrupt encoding).
    """
    encoding &= 0xFFFFFFFF
    common = dict(
        encoding=encoding,
        arch=arch.name if arch is not None else "?",
        has_lsda=bool(encoding & UNWIND_HAS_LSDA),
        personality_index=(encoding & UNWIND_PERSONALITY_MASK) >> 28,
        function_start=not encoding & UNWIND_IS_NOT_FUNCTION_START,
    )
    mode_bits = (encoding & UNWIND_MODE_MASK) >> 24
    name = arch.name if arch is not None else None
    if name in ("x86_64", "i386"):
        fields = _decode_x86(encoding, mode_bits, arch)
    elif name == "aarch64":
        fields = _decode_arm64(encoding, mode_bits, arch)
    else:
        fields = dict(mode="UNKNOWN")
    fields.update(common)
    fields["text"] = _describe(fields, arch)
    return Decoded(**fields)


def _decode_x86(encoding, mode_bits, arch):
    mode = X86_MODE_NAMES.get(mode_bits, "UNKNOWN")
    word = arch.address_size
    names = X86_64_COMPACT_REGISTERS if arch.name == "x86_64" else I386_COMPACT_REGISTERS
    if mode == "RBP_FRAME":
        offset = (encoding & X86_FRAME_OFFSET) >> 16
        fields = encoding & X86_FRAME_REGISTERS
        registers, saved = [], []
        for slot in range(5):
            compact = (fields >> (3 * slot)) & 7
            # 0 is "no register"; 7 has no meaning either (section 5).
            if compact in names:
                number = arch.number_of(names[compact])
                registers.append(number)
                # Slot i is at frame pointer - offset*word + i*word, and the
                # CFA is frame pointer + 2 words.
                saved.append((number, -word * (offset + 2 - slot)))
        return dict(mode=mode, registers=tuple(registers), saved=tuple(saved),
                    frame_offset=offset * word)
    if mode in ("STACK_IMMD", "STACK_IND"):
        size_field = (encoding & X86_FRAMELESS_STACK_SIZE) >> 16
        adjust = (encoding & X86_FRAMELESS_STACK_ADJUST) >> 13
        count = min((encoding & X86_FRAMELESS_REG_COUNT) >> 10, 6)   # 7 -> 6 (section 5)
        permutation = encoding & X86_FRAMELESS_REG_PERMUTATION
        compact = _unpermute(permutation, count, encoding)
        registers = tuple(arch.number_of(names[c]) for c in compact)
        # registers[0] is lowest; registers[count-1] sits just below the
        # return address (CFA - word), so at CFA - 2 words.
        saved = tuple((number, -word * (count - i + 1)) for i, number in enumerate(registers))
        out = dict(mode=mode, registers=registers, saved=saved)
        if mode == "STACK_IMMD":
            out["stack_size"] = size_field * word
        else:
            out["sub_offset"] = size_field
            out["stack_adjust"] = adjust * word
        return out
    if mode == "DWARF":
        return dict(mode=mode, dwarf_offset=encoding & DWARF_SECTION_OFFSET)
    return dict(mode=mode)


def _unpermute(permutation, count, encoding):
    """Compact register numbers (1..6) from the Lehmer-coded permutation.

    Digit i picks the digit-th smallest register number not used yet, the
    same algorithm as libunwind's and lldb's.
    """
    digits = []
    for radix in _PERMUTATION_RADICES.get(count, ()):
        digits.append(permutation // radix)
        permutation %= radix
    if count == 6:
        digits.append(0)
    unused = [1, 2, 3, 4, 5, 6]
    registers = []
    for digit in digits:
        if digit >= len(unused):
            raise DecodeError("compact encoding", None,
                              "encoding 0x%08x: register permutation names no register" % encoding)
        registers.append(unused.pop(digit))
    return registers


def _decode_arm64(encoding, mode_bits, arch):
    mode = ARM64_MODE_NAMES.get(mode_bits, "UNKNOWN")
    if mode in ("FRAME", "FRAMELESS"):
        registers = []
        for bit, first, second in ARM64_PAIRS:
            if encoding & bit:
                registers.extend((_arm64_number(arch, first), _arm64_number(arch, second)))
        # FRAME: x29/x30 sit at CFA-16/CFA-8 and the pairs follow below them.
        # FRAMELESS: the pairs start right below the CFA; the prologue
        # `stp x20, x19, [sp, #-16]!` puts x19 at CFA-8 and x20 at CFA-16.
        # (libunwind reads the first frameless one at CFA itself; the
        # disassembly of the corpus' frameless functions says CFA-8.)
        top = -24 if mode == "FRAME" else -8
        saved = tuple((number, top - 8 * i) for i, number in enumerate(registers))
        out = dict(mode=mode, registers=tuple(registers), saved=saved)
        if mode == "FRAMELESS":
            out["stack_size"] = 16 * ((encoding & ARM64_FRAMELESS_STACK_SIZE) >> 12)
        return out
    if mode == "DWARF":
        return dict(mode=mode, dwarf_offset=encoding & DWARF_SECTION_OFFSET)
    return dict(mode=mode)


def _arm64_number(arch, name):
    if name.startswith("d"):
        return _ARM64_D_BASE + int(name[1:])
    return arch.number_of(name)


def _register_name(arch, number):
    if arch.name == "aarch64" and _ARM64_D_BASE <= number < _ARM64_D_BASE + 32:
        return "d%d" % (number - _ARM64_D_BASE)
    return arch.name_of(number)


def _describe(fields, arch):
    """Readable one-line form, e.g. 'rbp frame: CFA=rbp+16, rbx=[CFA-24]'."""
    mode = fields["mode"]
    saved = " ".join("%s=[CFA%+d]" % (_register_name(arch, n), off) for n, off in fields.get("saved", ()))
    if mode == "RBP_FRAME":
        fp, word = arch.name_of(arch.fp), arch.address_size
        text = "%s frame: CFA=%s+%d" % (fp, fp, 2 * word)
    elif mode == "STACK_IMMD":
        text = "frameless: CFA=%s+%d" % (arch.name_of(arch.sp), fields["stack_size"])
    elif mode == "STACK_IND":
        text = "frameless: CFA=%s+(imm32 at function+0x%x)+%d" % (
            arch.name_of(arch.sp), fields["sub_offset"], fields["stack_adjust"])
    elif mode == "FRAME":
        text = "frame: CFA=x29+16"
    elif mode == "FRAMELESS":
        text = "frameless: CFA=sp+%d, return address in x30" % fields["stack_size"]
    elif mode == "DWARF":
        text = "dwarf: FDE at __eh_frame+0x%x" % fields["dwarf_offset"]
    elif mode == "NONE":
        text = "no unwind information"
    else:
        text = "unknown mode %d" % ((fields["encoding"] & UNWIND_MODE_MASK) >> 24)
    if saved:
        text += ", saved " + saved
    if fields["has_lsda"]:
        text += ", LSDA"
    if fields["personality_index"]:
        text += ", personality %d" % fields["personality_index"]
    if not fields["function_start"]:
        text += ", not a function start"
    return text


def stack_ind_size(decoded, function_start, arch, read_code):
    """Stack size of a STACK_IND function: the imm32 of its prologue's
    `sub $imm32, %rsp` (read from its code) + stack_adjust.

    Checks that the two bytes before the immediate are the `sub r/m, imm32`
    opcode with %rsp/%esp as operand (81 EC), so a wrong offset is reported
    instead of producing a bogus CFA.
    """
    if read_code is None:
        raise DecodeError("compact encoding", None,
                          "STACK_IND needs the function's code to find its stack size")
    where = function_start + decoded.sub_offset
    try:
        code = bytes(read_code(where - 2, 6))
    except MemoryReadError as exc:
        raise DecodeError("compact encoding", None, "STACK_IND: %s" % exc) from None
    if len(code) != 6:
        raise DecodeError("compact encoding", None, "STACK_IND: short code read at 0x%x" % where)
    if code[:2] != b"\x81\xec":
        raise DecodeError("compact encoding", None,
                          "STACK_IND: no `sub $imm32, %%%s` before 0x%x (bytes %s)"
                          % (arch.name_of(arch.sp), where, code[:2].hex()))
    return int.from_bytes(code[2:], "little") + decoded.stack_adjust


def to_row(decoded, function_start, arch, read_code=None, function_end=None):
    """The plugin.model.rules.Row the encoding means in the function's body.

    Returns None when the encoding gives no rule here: DWARF (the caller goes
    to __eh_frame at decoded.dwarf_offset), NONE and UNKNOWN. STACK_IND reads
    the stack size from the code through read_code(address, size) -> bytes.
    """
    mode = decoded.mode
    word = arch.address_size
    registers = {}
    if mode == "RBP_FRAME":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.fp, offset=2 * word)
        registers.update(_saved_rules(decoded))
        # The frame's own slots win over a (meaningless) rbp slot number.
        registers[arch.fp] = Rule(RuleKind.OFFSET, -2 * word)
        registers[arch.ra] = Rule(RuleKind.OFFSET, -word)
    elif mode in ("STACK_IMMD", "STACK_IND"):
        size = decoded.stack_size if mode == "STACK_IMMD" else \
            stack_ind_size(decoded, function_start, arch, read_code)
        cfa = CfaRule(CfaKind.REGISTER, register=arch.sp, offset=size)
        registers.update(_saved_rules(decoded))
        registers[arch.ra] = Rule(RuleKind.OFFSET, -word)
    elif mode == "FRAME":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.fp, offset=16)
        registers.update(_saved_rules(decoded))
        registers[arch.fp] = Rule(RuleKind.OFFSET, -16)
        registers[arch.ra] = Rule(RuleKind.OFFSET, -8)
    elif mode == "FRAMELESS":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.sp, offset=decoded.stack_size)
        registers.update(_saved_rules(decoded))
        registers[arch.ra] = Rule(RuleKind.SAME)      # the return address is still in x30
    else:
        return None
    return Row(address=function_start, cfa=cfa, registers=registers, end=function_end)


def _saved_rules(decoded):
    return {number: Rule(RuleKind.OFFSET, offset) for number, offset in decoded.saved}


# ---------------------------------------------------------------------------
# The __unwind_info section
# ---------------------------------------------------------------------------

class IndexEntry(NamedTuple):
    function_offset: int
    second_level_page_offset: int
    lsda_index_offset: int


class PageEntry(NamedTuple):
    function_offset: int          # relative to the image base
    encoding: int
    encoding_index: int = None    # compressed pages only


@dataclass(frozen=True)
class Page:
    index: int                    # first-level index entry this page hangs from
    kind: str                     # "regular", "compressed" or "none" (no page)
    offset: int                   # section offset of the page (0 for "none")
    function_offset: int          # first-level function offset: the page's start
    end_offset: int               # the next first-level function offset
    entries: tuple = ()
    encodings: tuple = ()         # page-local encodings (compressed pages)


@dataclass(frozen=True)
class Entry:
    function_start: int           # run-time addresses
    function_end: int
    encoding: int
    lsda: int = None              # run-time address of the LSDA, if any
    personality: int = None       # run-time address of the personality pointer slot
    page_index: int = None
    entry_index: int = None


class UnwindInfo:
    """A decoded __unwind_info section.

    region      the section's bytes (plugin.memory.Region)
    arch        plugin.arch Arch of the image (for decode())
    image_base  run-time address of __TEXT (vmaddr + slide): function
                offsets in the section are relative to it
    """

    def __init__(self, region, arch, image_base):
        self.region = region
        self.arch = arch
        self.image_base = image_base
        self.warnings = []
        self._pages = {}
        self._page_starts = {}
        cur = region.cursor(0)
        (self.version, self.common_encodings_offset, common_count,
         self.personalities_offset, personality_count,
         self.index_offset, index_count) = (cur.u32() for _ in range(7))
        if self.version != UNWIND_SECTION_VERSION:
            raise self._error(0, "unknown __unwind_info version %d" % self.version)
        self.common_encodings = self._u32_array(self.common_encodings_offset, common_count,
                                                "common encodings")
        self.personalities = self._u32_array(self.personalities_offset, personality_count,
                                             "personalities")
        self.index = self._read_index(index_count)
        self.lsdas = self._read_lsdas()
        self._lsda_by_function = None
        self._index_starts = [e.function_offset for e in self.index]

    # -- fixed tables --------------------------------------------------------------

    def _error(self, offset, cause):
        return DecodeError(self.region.name, offset, cause)

    def _u32_array(self, offset, count, what):
        if offset + 4 * count > self.region.size:
            raise self._error(offset, "%s (%d) run past the end of the section" % (what, count))
        cur = self.region.cursor(offset)
        return [cur.u32() for _ in range(count)]

    def _read_index(self, count):
        if self.index_offset + INDEX_ENTRY_SIZE * count > self.region.size:
            raise self._error(self.index_offset,
                              "first-level index (%d entries) runs past the end" % count)
        cur = self.region.cursor(self.index_offset)
        index = []
        for i in range(count):
            entry = IndexEntry(cur.u32(), cur.u32(), cur.u32())
            if index and entry.function_offset < index[-1].function_offset:
                raise self._error(cur.pos - INDEX_ENTRY_SIZE,
                                  "first-level entry %d is out of order (0x%x after 0x%x)"
                                  % (i, entry.function_offset, index[-1].function_offset))
            index.append(entry)
        return index

    def _read_lsdas(self):
        """The LSDA array spans the first to the last first-level LSDA offset."""
        if not self.index:
            return []
        start = self.index[0].lsda_index_offset
        end = self.index[-1].lsda_index_offset
        if end < start or end > self.region.size:
            raise self._error(self.index_offset, "LSDA array 0x%x..0x%x is not inside the section"
                              % (start, end))
        cur = self.region.cursor(start)
        return [(cur.u32(), cur.u32()) for _ in range((end - start) // LSDA_ENTRY_SIZE)]

    # -- second-level pages ----------------------------------------------------------

    @property
    def page_count(self):
        """Number of first-level entries that have a page (all but the sentinel)."""
        return max(0, len(self.index) - 1)

    def page(self, i):
        """Decoded page `i`; DecodeError for an unknown kind or a corrupt page."""
        if not 0 <= i < self.page_count:
            raise self._error(self.index_offset, "no second-level page %d" % i)
        page = self._pages.get(i)
        if page is None:
            page = self._decode_page(i)
            self._pages[i] = page
            self._page_starts[i] = [e.function_offset for e in page.entries]
        return page

    def pages(self):
        """All pages in order, skipping (with a warning) pages of unknown kind."""
        out = []
        for i in range(self.page_count):
            kind = self._page_kind(i)
            if kind is not None and kind not in PAGE_KINDS:
                self._warn("skipping second-level page %d at 0x%x with unknown kind %d"
                           % (i, self.index[i].second_level_page_offset, kind))
                continue
            out.append(self.page(i))
        return out

    def _warn(self, message):
        if message not in self.warnings:
            self.warnings.append(message)

    def _page_kind(self, i):
        offset = self.index[i].second_level_page_offset
        if offset == 0:
            return None
        return self.region.cursor(offset).u32()

    def _decode_page(self, i):
        first = self.index[i]
        start, end = first.function_offset, self.index[i + 1].function_offset
        offset = first.second_level_page_offset
        if offset == 0:
            return Page(i, "none", 0, start, end)
        cur = self.region.cursor(offset)
        kind = cur.u32()
        if kind == SECOND_LEVEL_REGULAR:
            entries_at, count = cur.u16(), cur.u16()
            entries, encodings = self._regular_entries(offset + entries_at, count), ()
        elif kind == SECOND_LEVEL_COMPRESSED:
            entries_at, count, encodings_at, encodings_count = cur.u16(), cur.u16(), cur.u16(), cur.u16()
            encodings = tuple(self._u32_array(offset + encodings_at, encodings_count,
                                              "page %d encodings" % i))
            entries = self._compressed_entries(offset + entries_at, count, start, encodings, i)
        else:
            raise self._error(offset, "second-level page %d has unknown kind %d" % (i, kind))
        self._check_order(entries, start, end, offset, i)
        return Page(i, PAGE_KINDS[kind], offset, start, end, tuple(entries), encodings)

    def _regular_entries(self, at, count):
        if at + REGULAR_ENTRY_SIZE * count > self.region.size:
            raise self._error(at, "regular page entries (%d) run past the end" % count)
        cur = self.region.cursor(at)
        return [PageEntry(cur.u32(), cur.u32()) for _ in range(count)]

    def _compressed_entries(self, at, count, base, local, page_index):
        raw = self._u32_array(at, count, "compressed page entries")
        common = self.common_encodings
        entries = []
        for n, word in enumerate(raw):
            which = word >> 24
            if which < len(common):
                encoding = common[which]
            elif which - len(common) < len(local):
                encoding = local[which - len(common)]
            else:
                raise self._error(at + 4 * n, "page %d entry %d: encoding index %d is past the "
                                  "%d common and %d page encodings"
                                  % (page_index, n, which, len(common), len(local)))
            entries.append(PageEntry(base + (word & 0x00FFFFFF), encoding, which))
        return entries

    def _check_order(self, entries, start, end, offset, page_index):
        previous = start
        for n, entry in enumerate(entries):
            if entry.function_offset < previous:
                raise self._error(offset, "page %d entry %d (0x%x) is out of order"
                                  % (page_index, n, entry.function_offset))
            if entry.function_offset >= end:
                raise self._error(offset, "page %d entry %d (0x%x) lies past the page's end 0x%x"
                                  % (page_index, n, entry.function_offset, end))
            previous = entry.function_offset

    # -- lookups ---------------------------------------------------------------------

    def lookup(self, pc):
        """Entry covering run-time address `pc`, or None if no entry covers it."""
        offset = pc - self.image_base
        if self.page_count == 0 or not self._index_starts[0] <= offset < self._index_starts[-1]:
            return None
        page_index = bisect.bisect_right(self._index_starts, offset, 0, self.page_count) - 1
        page = self.page(page_index)
        starts = self._page_starts[page_index]
        # bisect_right lands after every entry at the same offset, which
        # drops zero-length entries in favour of the last one.
        n = bisect.bisect_right(starts, offset) - 1
        if n < 0:
            return None
        return self._entry(page, n)

    def _entry(self, page, n):
        raw = page.entries[n]
        end = page.end_offset
        for later in page.entries[n + 1:]:
            if later.function_offset > raw.function_offset:
                end = later.function_offset
                break
        return Entry(self.image_base + raw.function_offset, self.image_base + end, raw.encoding,
                     self._lsda_for(raw), self._personality_for(raw.encoding),
                     page.index, n)

    def _lsda_for(self, raw):
        if not raw.encoding & UNWIND_HAS_LSDA:
            return None
        if self._lsda_by_function is None:
            self._lsda_by_function = dict(self.lsdas)
        lsda = self._lsda_by_function.get(raw.function_offset)
        return None if lsda is None else self.image_base + lsda

    def _personality_for(self, encoding):
        index = (encoding & UNWIND_PERSONALITY_MASK) >> 28
        if index == 0 or index > len(self.personalities):
            return None
        return self.image_base + self.personalities[index - 1]

    def entries(self):
        """[(function_start, function_end, encoding)] in address order, zero-length dropped."""
        out = []
        for page in self.pages():
            items = page.entries
            for n, raw in enumerate(items):
                end = items[n + 1].function_offset if n + 1 < len(items) else page.end_offset
                if end > raw.function_offset:
                    out.append((self.image_base + raw.function_offset, self.image_base + end,
                                raw.encoding))
        return out

    def decode(self, entry):
        """decode_encoding() of an Entry (or an encoding) for this image's arch."""
        encoding = entry.encoding if isinstance(entry, Entry) else entry
        return decode_encoding(encoding, self.arch)

    def row(self, entry, read_code=None):
        """to_row() of an Entry from lookup()."""
        return to_row(self.decode(entry), entry.function_start, self.arch, read_code,
                      entry.function_end)
