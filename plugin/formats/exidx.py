"""ARM EHABI decoder: the .ARM.exidx index, .ARM.extab entries, unwind opcodes.

Facts from the Exception Handling ABI for the Arm Architecture (ARM IHI
0038), sections 6, 7 and 10:

    index entry (8 bytes, sorted by function address)
      word 0: prel31 offset to the function start (bit 31 clear)
      word 1: 0x1 EXIDX_CANTUNWIND; bit 31 set: the compact-model table
              entry itself (inline); else a prel31 offset to the
              .ARM.extab entry
    prel31: bits 0-30 sign-extended, added to the address of the word
    table entry, compact model: bit 31 set, bits 24-27 the personality
      index: 0 = __aeabi_unwind_cpp_pr0 (3 opcode bytes in bits 0-23),
      1/2 = __aeabi_unwind_cpp_pr1/pr2 (bits 16-23 count N more words,
      2 opcode bytes in bits 0-15, then N words of 4; descriptors follow)
    table entry, generic model: bit 31 clear, a prel31 offset to the
      personality routine; GCC's personalities then use the pr1 layout
      with an 8-bit count and 3 opcode bytes in the first word; the LSDA
      follows the opcode words
    opcode bytes are taken from each word most significant byte first

The opcodes themselves are decoded by plugin.formats.exidx_ops. Nothing
here applies them: that is the `exidx` strategy's business. Every read goes
through plugin.memory.Region and bad input raises DecodeError only.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats.exidx_ops import Instruction, decode_opcodes

INDEX_SECTION = ".ARM.exidx"
TABLE_SECTION = ".ARM.extab"
ENTRY_SIZE = 8
EXIDX_CANTUNWIND = 0x1
MAX_ENTRIES = 1 << 22           # 32 MiB of index: far beyond any real module

COMPACT_PERSONALITIES = {0: "__aeabi_unwind_cpp_pr0", 1: "__aeabi_unwind_cpp_pr1",
                         2: "__aeabi_unwind_cpp_pr2"}
# Personality routines whose data starts with unwind opcodes in the pr1 layout.
GCC_PERSONALITIES = frozenset(("__gcc_personality_v0", "__gxx_personality_v0",
                               "__gcj_personality_v0", "__gnu_objc_personality_v0"))


class EntryKind(str, Enum):
    """What the second word of an index entry holds."""
    CANTUNWIND = "cantunwind"   # EXIDX_CANTUNWIND: the function cannot be unwound
    INLINE = "inline"           # the compact-model table entry itself
    TABLE = "table"             # a prel31 offset to an .ARM.extab entry


class Model(str, Enum):
    COMPACT = "compact"         # __aeabi_unwind_cpp_pr0/1/2
    GENERIC = "generic"         # a personality routine named by address


@dataclass(frozen=True)
class IndexEntry:
    index: int
    offset: int                 # section offset of the entry
    function: int               # start address of the function (prel31 of word 0)
    end: Optional[int]          # the next entry's function (None for the last entry)
    kind: EntryKind
    word: int                   # the raw second word
    table: Optional[int] = None  # address of the .ARM.extab entry (kind TABLE)

    def contains(self, pc):
        return self.function <= pc and (self.end is None or pc < self.end)


@dataclass(frozen=True)
class UnwindEntry:
    """An index entry with its table entry and opcodes decoded."""
    entry: IndexEntry
    model: Optional[Model]             # None for EXIDX_CANTUNWIND
    personality_index: Optional[int] = None   # compact model: 0, 1 or 2
    personality: Optional[int] = None  # generic model: address of the routine
    opcodes_at: Optional[int] = None   # address of the first word holding opcodes
    opcode_words: int = 0
    opcodes: bytes = b""
    instructions: Tuple[Instruction, ...] = ()
    lsda: Optional[int] = None         # address right after the opcode words (pr1/pr2, generic)
    decoded: bool = False              # False: no opcodes, or a personality whose data is unknown

    @property
    def personality_name(self):
        if self.personality_index is not None:
            return COMPACT_PERSONALITIES[self.personality_index]
        return None


def prel31(word, address):
    """The address a prel31 field at `address` holding `word` points to."""
    value = word & 0x7FFFFFFF
    if value & 0x40000000:
        value -= 0x80000000
    return (address + value) & 0xFFFFFFFF


class ExidxTable:
    """A decoded .ARM.exidx section.

    index: a plugin.memory.Region over the section at its runtime address.
    extab_region(address): a Region that holds the table entry at `address`
    (normally the module's read-only segment or the .ARM.extab section), or
    None when that address is not readable. The index is read once and
    checked sorted; table entries are decoded per entry on demand.
    """

    def __init__(self, index, extab_region: Callable[[int], Optional[object]]):
        self.name = index.name
        self.address = index.address
        self.size = index.size
        self.region = index
        self._extab_region = extab_region
        if self.size % ENTRY_SIZE:
            raise DecodeError(self.name, self.size - self.size % ENTRY_SIZE,
                              "section size 0x%x is not a multiple of %d" % (self.size, ENTRY_SIZE),
                              DecodeKind.MALFORMED)
        count = self.size // ENTRY_SIZE
        if count > MAX_ENTRIES:
            raise DecodeError(self.name, 0, "%d entries is more than the %d allowed" % (count, MAX_ENTRIES),
                              DecodeKind.LIMIT)
        self.count = count
        data = index.all_bytes() if count else b""
        order = index.byteorder
        words = [int.from_bytes(data[i:i + 4], order) for i in range(0, len(data), 4)]
        self._words = words
        starts = []
        for i in range(count):
            word0 = words[2 * i]
            if word0 & 0x80000000:
                raise DecodeError(self.name, i * ENTRY_SIZE,
                                  "bit 31 of the function offset 0x%08x is set" % word0, DecodeKind.MALFORMED)
            starts.append(prel31(word0, self.address + i * ENTRY_SIZE))
        for i in range(1, count):
            if starts[i] < starts[i - 1]:
                raise DecodeError(self.name, i * ENTRY_SIZE,
                                  "index not sorted: function 0x%x follows 0x%x" % (starts[i], starts[i - 1]),
                                  DecodeKind.MALFORMED)
        self._starts = starts

    # -- the index ---------------------------------------------------------

    def entry(self, i):
        if not 0 <= i < self.count:
            raise IndexError(i)
        word = self._words[2 * i + 1]
        offset = i * ENTRY_SIZE
        end = self._starts[i + 1] if i + 1 < self.count else None
        if word == EXIDX_CANTUNWIND:
            kind, table = EntryKind.CANTUNWIND, None
        elif word & 0x80000000:
            kind, table = EntryKind.INLINE, None
        else:
            kind, table = EntryKind.TABLE, prel31(word, self.address + offset + 4)
        return IndexEntry(i, offset, self._starts[i], end, kind, word, table)

    def entries(self):
        return [self.entry(i) for i in range(self.count)]

    def find(self, pc) -> Optional[IndexEntry]:
        """The entry covering pc by binary search: the last one starting at or before it."""
        i = bisect.bisect_right(self._starts, pc) - 1
        if i < 0:
            return None
        return self.entry(i)

    # -- table entries -----------------------------------------------------

    def describe(self, entry: IndexEntry, personality_name: Callable[[int], Optional[str]] = None) -> UnwindEntry:
        """Decode entry's table entry and opcodes.

        personality_name(address) names a generic model's routine (from
        symbols); its opcodes are decoded only where that name is one of
        GCC_PERSONALITIES, whose data layout is known.
        """
        if entry.kind == EntryKind.CANTUNWIND:
            return UnwindEntry(entry, None)
        if entry.kind == EntryKind.INLINE:
            at = self.address + entry.offset + 4
            return self._compact(entry, entry.word, at, None, self.name, entry.offset + 4)
        region = self._extab_region(entry.table)
        if region is None or not region.contains(entry.table):
            raise DecodeError(self.name, entry.offset + 4,
                              "table entry at 0x%x is outside readable memory" % entry.table,
                              DecodeKind.UNREADABLE)
        start = entry.table - region.address
        word = self._word(region, start)
        if word & 0x80000000:
            return self._compact(entry, word, entry.table, region, region.name, start)
        personality = prel31(word, entry.table)
        name = personality_name(personality) if personality_name is not None else None
        if name is None or _bare_name(name) not in GCC_PERSONALITIES:
            return UnwindEntry(entry, Model.GENERIC, personality=personality, opcodes_at=entry.table + 4)
        first = self._word(region, start + 4)
        extra = first >> 24
        data, lsda = self._opcode_words(region, start + 4, first, extra, 3)
        return UnwindEntry(entry, Model.GENERIC, personality=personality, opcodes_at=entry.table + 4,
                           opcode_words=1 + extra, opcodes=data,
                           instructions=decode_opcodes(data, region.name, start + 4),
                           lsda=lsda, decoded=True)

    def _compact(self, entry, word, at, region, section, offset):
        if word & 0x70000000:
            raise DecodeError(section, offset, "compact entry 0x%08x has bits 28-30 set" % word,
                              DecodeKind.MALFORMED)
        index = (word >> 24) & 0x0F
        if index not in COMPACT_PERSONALITIES:
            raise DecodeError(section, offset, "compact model personality index %d is reserved" % index,
                              DecodeKind.UNSUPPORTED)
        if index == 0:
            data = word.to_bytes(4, "big")[1:]
            lsda = None if region is None else at + 4
            words = 1
        elif region is None:
            raise DecodeError(section, offset, "an inline entry must use personality index 0, not %d" % index,
                              DecodeKind.MALFORMED)
        else:
            extra = (word >> 16) & 0xFF
            data, lsda = self._opcode_words(region, offset, word, extra, 2)
            words = 1 + extra
        return UnwindEntry(entry, Model.COMPACT, personality_index=index, opcodes_at=at,
                           opcode_words=words, opcodes=data,
                           instructions=decode_opcodes(data, section, offset), lsda=lsda, decoded=True)

    def _opcode_words(self, region, offset, first, extra, first_bytes):
        """The opcode bytes of a first word (its low `first_bytes`) and `extra` words after it."""
        if offset + 4 * (1 + extra) > region.size:
            raise DecodeError(region.name, offset, "%d more opcode words run past the end (size 0x%x)"
                              % (extra, region.size), DecodeKind.TRUNCATED)
        data = bytearray(first.to_bytes(4, "big")[4 - first_bytes:])
        for k in range(extra):
            data += self._word(region, offset + 4 * (k + 1)).to_bytes(4, "big")
        return bytes(data), region.address + offset + 4 * (1 + extra)

    @staticmethod
    def _word(region, offset):
        return int.from_bytes(region.read(offset, 4), region.byteorder)


def _bare_name(name):
    """`__gxx_personality_v0@plt` / `...@@CXXABI_1.3` -> `__gxx_personality_v0`."""
    return name.split("@", 1)[0]
