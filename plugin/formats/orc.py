"""The Linux kernel's ORC unwind tables (x86-64): `.orc_unwind_ip`, `.orc_unwind`, `.orc_header`.

Facts (from the kernel's arch/x86/include/asm/orc_types.h and
arch/x86/kernel/unwind_orc.c of each version, and scripts/orc_hash.sh):

- `.orc_unwind_ip` is an array of s32, each relative to its own address:
  ip[i] = address of ip_table[i] + (s32)ip_table[i]; sorted by ip (vmlinux
  since 5.6; a module's table is sorted when it is loaded).
- `.orc_unwind` is an array of 6-byte entries, the same count: s16
  sp_offset, s16 bp_offset, u16 flags. The flags' low byte is sp_reg (bits
  0-3) and bp_reg (bits 4-7) in every version; the high bits changed:

  Layout.V1 (v4.14 to v6.2): type bits 8-9 (CALL 0, REGS 1, REGS_PARTIAL 2,
      called REGS_IRET before 5.8), end bit 10. An entry whose sp_reg is
      UNDEFINED is the end of the stack when `end` is set, else undefined.
  Layout.V2 (v6.3, commit ffb1b4a41016 "Add 'signal' field"): type bits
      8-9 as V1, signal bit 10, end bit 11.
  Layout.V3 (v6.4 on, commit fb799447ae29 "Split UNWIND_HINT_EMPTY in
      two"): type bits 8-10 (UNDEFINED 0, END_OF_STACK 1, CALL 2, REGS 3,
      REGS_PARTIAL 4), signal bit 11; no end bit.
- `.orc_header` (v6.4, backported to 6.3.10) holds 20 bytes, a SHA-1 of
  orc_types.h identifying the layout (HEADER_HASHES).

The layout is chosen by the header where there is one, else by the
kernel's version string, else by what the entries' bits allow
(layout_from_flags); choose_layout says which decided.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from plugin.errors import DecodeError, DecodeKind

ENTRY_SIZE = 6
IP_SIZE = 4


class Layout(Enum):
    V1 = "v4.14-v6.2"
    V2 = "v6.3"
    V3 = "v6.4+"


class LayoutFoundBy(Enum):
    HEADER = ".orc_header hash"
    KERNEL_VERSION = "kernel version string"
    ENTRY_BITS = "the entries' bits"
    GIVEN = "given by the caller"


class OrcType(Enum):
    """The entry's kind, the same names for every layout (V1/V2's end-of-stack
    and undefined entries, spelled there by sp_reg UNDEFINED, included)."""
    UNDEFINED = "undefined"
    END_OF_STACK = "end of stack"
    CALL = "call"
    REGS = "regs"
    REGS_PARTIAL = "regs partial"


class OrcReg(IntEnum):
    UNDEFINED = 0
    PREV_SP = 1
    DX = 2
    DI = 3
    BP = 4
    SP = 5
    R10 = 6
    R13 = 7
    BP_INDIRECT = 8
    SP_INDIRECT = 9


REG_NAMES = {OrcReg.PREV_SP: "cfa", OrcReg.DX: "dx", OrcReg.DI: "di", OrcReg.BP: "bp", OrcReg.SP: "sp",
             OrcReg.R10: "r10", OrcReg.R13: "r13"}

# 20-byte identifiers in .orc_header (scripts/orc_hash.sh over orc_types.h).
HEADER_HASHES = {
    bytes.fromhex("fe5d32bf581bd63b2ca9a5c65ba5a625eab3fe24"): Layout.V3,
    bytes.fromhex("db84aed4103b31dd51e017f8f79783ca985c2c51"): Layout.V2,
}

_V1_V2_TYPES = (OrcType.CALL, OrcType.REGS, OrcType.REGS_PARTIAL)
_V3_TYPES = (OrcType.UNDEFINED, OrcType.END_OF_STACK, OrcType.CALL, OrcType.REGS, OrcType.REGS_PARTIAL)


@dataclass(frozen=True)
class OrcEntry:
    """One decoded entry: the rule for [ip, next entry's ip)."""
    index: int
    ip: int
    sp_reg: int             # an OrcReg value, or another number a damaged table holds
    sp_offset: int
    bp_reg: int
    bp_offset: int
    type: OrcType
    signal: bool            # V2/V3's bit; V1 has none (False)
    end: bool               # V1/V2's bit; V3 has none (False)
    flags: int              # the raw 16 bits
    raw_type: int           # the type bits as stored (V1/V2: 0-3, V3: 0-7)

    @property
    def known_type(self) -> bool:
        return self.raw_type >= 0


def decode_flags(flags: int, layout: Layout) -> Tuple[OrcType, bool, bool, int]:
    """(type, signal, end, raw type bits) of an entry's 16-bit field. A raw type
    no layout defines decodes as UNDEFINED with raw type -1 - bits."""
    sp_reg = flags & 0xF
    if layout is Layout.V3:
        raw = (flags >> 8) & 7
        signal, end = bool(flags & 0x800), False
        if raw >= len(_V3_TYPES):
            return OrcType.UNDEFINED, signal, end, -1 - raw
        return _V3_TYPES[raw], signal, end, raw
    raw = (flags >> 8) & 3
    if layout is Layout.V2:
        signal, end = bool(flags & 0x400), bool(flags & 0x800)
    else:
        signal, end = False, bool(flags & 0x400)
    if sp_reg == OrcReg.UNDEFINED:
        return (OrcType.END_OF_STACK if end else OrcType.UNDEFINED), signal, end, raw
    if raw >= len(_V1_V2_TYPES):
        return OrcType.UNDEFINED, signal, end, -1 - raw
    return _V1_V2_TYPES[raw], signal, end, raw


def decode_entry(index: int, ip: int, raw: bytes, layout: Layout) -> OrcEntry:
    sp_offset, bp_offset, flags = struct.unpack("<hhH", raw)
    kind, signal, end, raw_type = decode_flags(flags, layout)
    return OrcEntry(index, ip, flags & 0xF, sp_offset, (flags >> 4) & 0xF, bp_offset, kind, signal, end,
                    flags, raw_type)


def layout_from_header(header: bytes) -> Optional[Layout]:
    """The layout a .orc_header names, None for an unknown hash (or size)."""
    return HEADER_HASHES.get(bytes(header)) if len(header) == 20 else None


_VERSION = re.compile(rb"Linux version (\d+)\.(\d+)[.\d]*[^\s\x00]*")


def find_version_string(data) -> Optional[str]:
    """The kernel release in `Linux version X.Y...` within data (bytes or an mmap), or None."""
    match = _VERSION.search(data)
    return match.group(0)[len(b"Linux version "):].decode("ascii", "replace") if match else None


def layout_from_version(release: str) -> Optional[Layout]:
    """The layout of a kernel release ("6.1.0-50-amd64"), None if it is not X.Y... or before 4.14."""
    match = re.match(r"(\d+)\.(\d+)", release)
    if not match:
        return None
    version = (int(match.group(1)), int(match.group(2)))
    if version < (4, 14):
        return None
    if version >= (6, 4):
        return Layout.V3
    return Layout.V2 if version == (6, 3) else Layout.V1


def sp_indirect_adds_after(release: Optional[str]) -> bool:
    """Is an SP_INDIRECT CFA the word at sp plus sp_offset (since v5.12), not the word at sp +
    sp_offset (before)? True where the release is not known."""
    match = re.match(r"(\d+)\.(\d+)", release or "")
    return match is None or (int(match.group(1)), int(match.group(2))) >= (5, 12)


def layout_from_flags(flags: Iterable[int]) -> Optional[Layout]:
    """The layout the entries' bits allow: type bits 8-9 equal to 3 exist only in
    V3 (its REGS); bit 11 set without them is V2's end; neither is V1. None
    when the bits fit no layout (V3 types 5-7 beside V1/V2-only patterns)."""
    type3 = bit11 = bad_v3 = False
    for value in flags:
        type3 |= (value >> 8) & 3 == 3
        bit11 |= bool(value & 0x800)
        bad_v3 |= (value >> 8) & 7 >= 5
        if value >> 12:
            return None
    if type3:
        return None if bad_v3 else Layout.V3
    return Layout.V2 if bit11 else Layout.V1


def choose_layout(header: Optional[bytes], release: Optional[str],
                  flags: Iterable[int]) -> Tuple[Layout, LayoutFoundBy, List[str]]:
    """(layout, what decided it, notes). DecodeError for an unknown .orc_header or
    entries whose bits fit no layout."""
    notes = []
    if header is not None:
        layout = layout_from_header(header)
        if layout is None:
            raise DecodeError(".orc_header", 0, "an unknown layout hash %s" % bytes(header).hex(),
                              DecodeKind.UNSUPPORTED)
        return layout, LayoutFoundBy.HEADER, notes
    by_bits = layout_from_flags(flags)
    by_version = layout_from_version(release) if release else None
    if by_version is not None:
        if by_bits is not None and by_bits is not by_version:
            notes.append("kernel %s has the %s layout but its entries' bits look like %s"
                         % (release, by_version.value, by_bits.value))
        return by_version, LayoutFoundBy.KERNEL_VERSION, notes
    if by_bits is None:
        raise DecodeError(".orc_unwind", None, "the entries' bits fit no ORC layout "
                          "(and no .orc_header or kernel version says which)", DecodeKind.MALFORMED)
    return by_bits, LayoutFoundBy.ENTRY_BITS, notes


Read = Callable[[int, int], bytes]


MEMO_SIZE = 4096       # pcs' and entries' lookups an OrcTable keeps (the tables never change)


class OrcTable:
    """An ORC table in some memory, read a few bytes at a time (a binary search
    reads about log2(count) ips over a slow gdbstub, never the whole table).
    Once the search has narrowed to one 4 KiB page of ips, that page is
    decoded at once and searched in Python; found indexes and decoded
    entries are kept (MEMO_SIZE each: the tables never change), so the
    same stop's frames, walked again, read nothing.

    read(address, size) returns exactly size bytes or raises (the caller's errors)."""

    def __init__(self, ip_address: int, entries_address: int, count: int, layout: Layout, read: Read) -> None:
        self.ip_address, self.entries_address, self.count = ip_address, entries_address, count
        self.layout, self._read = layout, read
        self._found: Dict[int, Optional[int]] = {}
        self._entries: Dict[int, OrcEntry] = {}

    def ip(self, index: int) -> int:
        at = self.ip_address + IP_SIZE * index
        return (at + struct.unpack("<i", self._read(at, IP_SIZE))[0]) & 0xFFFFFFFFFFFFFFFF

    def entry(self, index: int) -> OrcEntry:
        entry = self._entries.get(index)
        if entry is None:
            raw = self._read(self.entries_address + ENTRY_SIZE * index, ENTRY_SIZE)
            entry = decode_entry(index, self.ip(index), raw, self.layout)
            if len(self._entries) >= MEMO_SIZE:
                self._entries.clear()
            self._entries[index] = entry
        return entry

    def find(self, pc: int) -> Optional[int]:
        """The index of the last entry whose ip <= pc (the kernel's __orc_find), or None."""
        if pc in self._found:
            return self._found[pc]
        low, high, found = 0, self.count - 1, None
        while low <= high:
            if (self.ip_address + IP_SIZE * low) >> 12 == (self.ip_address + IP_SIZE * high) >> 12:
                found = self._find_in_page(pc, low, high, found)
                break
            middle = (low + high) // 2
            if self.ip(middle) <= pc:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        if len(self._found) >= MEMO_SIZE:
            self._found.clear()
        self._found[pc] = found
        return found

    def _find_in_page(self, pc: int, low: int, high: int, found: Optional[int]) -> Optional[int]:
        """The search's last steps, ips low..high (one page of memory) read and decoded at once."""
        at = self.ip_address + IP_SIZE * low
        count = high - low + 1
        offsets = struct.unpack("<%di" % count, self._read(at, IP_SIZE * count))
        mask = 0xFFFFFFFFFFFFFFFF
        base, low, high = low, 0, count - 1
        while low <= high:
            middle = (low + high) // 2
            if (at + IP_SIZE * middle + offsets[middle]) & mask <= pc:
                found, low = base + middle, middle + 1
            else:
                high = middle - 1
        return found

    def lookup(self, pc: int) -> Optional[OrcEntry]:
        index = self.find(pc)
        return None if index is None else self.entry(index)


def decode_all(ip_bytes: bytes, entry_bytes: bytes, ip_address: int, layout: Layout) -> Iterator[OrcEntry]:
    """Every entry of whole tables in bytes, in table order. DecodeError when the sizes disagree."""
    check_sizes(len(ip_bytes), len(entry_bytes))
    offsets = struct.iter_unpack("<i", ip_bytes)
    mask = 0xFFFFFFFFFFFFFFFF
    for index, ((offset,), (sp_offset, bp_offset, flags)) in enumerate(
            zip(offsets, struct.iter_unpack("<hhH", entry_bytes))):
        kind, signal, end, raw_type = decode_flags(flags, layout)
        yield OrcEntry(index, (ip_address + IP_SIZE * index + offset) & mask, flags & 0xF, sp_offset,
                       (flags >> 4) & 0xF, bp_offset, kind, signal, end, flags, raw_type)


def check_sizes(ip_size: int, entries_size: int) -> int:
    """The entry count of tables of these sizes; DecodeError unless they agree."""
    if ip_size % IP_SIZE or entries_size % ENTRY_SIZE or ip_size // IP_SIZE != entries_size // ENTRY_SIZE:
        kind = DecodeKind.TRUNCATED if ip_size % IP_SIZE or entries_size % ENTRY_SIZE else DecodeKind.MALFORMED
        raise DecodeError(".orc_unwind", None, ".orc_unwind_ip (%d bytes) and .orc_unwind (%d bytes) do not "
                          "hold the same number of entries" % (ip_size, entries_size), kind)
    return ip_size // IP_SIZE


def all_flags(entry_bytes: bytes) -> Iterator[int]:
    """The 16-bit field of each entry, for layout_from_flags."""
    return (flags for _, _, flags in struct.iter_unpack("<hhH", entry_bytes[:len(entry_bytes)
                                                                             - len(entry_bytes) % ENTRY_SIZE]))


def reg_text(reg: int, offset: int, added_after: bool = True) -> str:
    """A base register and offset for people: "sp+8", "[sp]+8" (SP_INDIRECT:
    the word at sp, plus the offset; before v5.12, not added_after: "[sp+8]"),
    "[bp+16]" (BP_INDIRECT), "undefined"."""
    sign = "%+d" % offset
    if reg == OrcReg.UNDEFINED:
        return "undefined"
    if reg == OrcReg.SP_INDIRECT:
        return "[sp]" + sign if added_after else "[sp%s]" % sign
    if reg == OrcReg.BP_INDIRECT:
        return "[bp%s]" % sign
    name = REG_NAMES.get(reg)
    return (name + sign) if name else "reg%d%s" % (reg, sign)


def entry_text(entry: OrcEntry, added_after: bool = True) -> str:
    """"cfa=sp+8 bp=cfa-16 call", with signal/end where set (added_after: reg_text's)."""
    words = ["cfa=" + reg_text(entry.sp_reg, entry.sp_offset, added_after)]
    words.append("bp=" + ("unchanged" if entry.bp_reg == OrcReg.UNDEFINED
                          else "[%s]" % reg_text(entry.bp_reg, entry.bp_offset)))
    words.append(entry.type.value if entry.known_type else "type %d (unknown)" % (-1 - entry.raw_type))
    if entry.signal:
        words.append("signal")
    if entry.end:
        words.append("end")
    return " ".join(words)
