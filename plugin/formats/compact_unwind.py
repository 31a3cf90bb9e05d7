"""Apple compact unwind: the __TEXT,__unwind_info section (its opcodes: compact_opcodes.py).

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
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats.compact_opcodes import (UNWIND_HAS_LSDA, UNWIND_PERSONALITY_MASK, Decoded, decode_encoding,
                                           stack_ind_size, to_row)

__all__ = ["UnwindInfo", "Entry", "Page", "IndexEntry", "PageEntry", "Decoded", "decode_encoding",
           "stack_ind_size", "to_row"]

SECTION = "__unwind_info"
UNWIND_SECTION_VERSION = 1
SECOND_LEVEL_REGULAR = 2
SECOND_LEVEL_COMPRESSED = 3
PAGE_KINDS = {SECOND_LEVEL_REGULAR: "regular", SECOND_LEVEL_COMPRESSED: "compressed"}

HEADER_SIZE = 28
INDEX_ENTRY_SIZE = 12
LSDA_ENTRY_SIZE = 8
REGULAR_ENTRY_SIZE = 8

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
            raise self._error(0, "unknown __unwind_info version %d" % self.version,
                              DecodeKind.UNSUPPORTED)
        self.common_encodings = self._u32_array(self.common_encodings_offset, common_count,
                                                "common encodings")
        self.personalities = self._u32_array(self.personalities_offset, personality_count,
                                             "personalities")
        self.index = self._read_index(index_count)
        self.lsdas = self._read_lsdas()
        self._lsda_by_function = None
        self._index_starts = [e.function_offset for e in self.index]

    # -- fixed tables --------------------------------------------------------------

    def _error(self, offset, cause, kind: DecodeKind):
        return DecodeError(self.region.name, offset, cause, kind)

    def _u32_array(self, offset, count, what):
        if offset + 4 * count > self.region.size:
            raise self._error(offset, "%s (%d) run past the end of the section" % (what, count),
                              DecodeKind.TRUNCATED)
        cur = self.region.cursor(offset)
        return [cur.u32() for _ in range(count)]

    def _read_index(self, count):
        if self.index_offset + INDEX_ENTRY_SIZE * count > self.region.size:
            raise self._error(self.index_offset,
                              "first-level index (%d entries) runs past the end" % count, DecodeKind.TRUNCATED)
        cur = self.region.cursor(self.index_offset)
        index = []
        for i in range(count):
            entry = IndexEntry(cur.u32(), cur.u32(), cur.u32())
            if index and entry.function_offset < index[-1].function_offset:
                raise self._error(cur.pos - INDEX_ENTRY_SIZE,
                                  "first-level entry %d is out of order (0x%x after 0x%x)"
                                  % (i, entry.function_offset, index[-1].function_offset), DecodeKind.MALFORMED)
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
                              % (start, end), DecodeKind.MALFORMED)
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
            raise self._error(self.index_offset, "no second-level page %d" % i, DecodeKind.ABSENT)
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
            raise self._error(offset, "second-level page %d has unknown kind %d" % (i, kind),
                              DecodeKind.UNSUPPORTED)
        self._check_order(entries, start, end, offset, i)
        return Page(i, PAGE_KINDS[kind], offset, start, end, tuple(entries), encodings)

    def _regular_entries(self, at, count):
        if at + REGULAR_ENTRY_SIZE * count > self.region.size:
            raise self._error(at, "regular page entries (%d) run past the end" % count,
                              DecodeKind.TRUNCATED)
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
                                  % (page_index, n, which, len(common), len(local)), DecodeKind.MALFORMED)
            entries.append(PageEntry(base + (word & 0x00FFFFFF), encoding, which))
        return entries

    def _check_order(self, entries, start, end, offset, page_index):
        previous = start
        for n, entry in enumerate(entries):
            if entry.function_offset < previous:
                raise self._error(offset, "page %d entry %d (0x%x) is out of order"
                                  % (page_index, n, entry.function_offset), DecodeKind.MALFORMED)
            if entry.function_offset >= end:
                raise self._error(offset, "page %d entry %d (0x%x) lies past the page's end 0x%x"
                                  % (page_index, n, entry.function_offset, end), DecodeKind.MALFORMED)
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

    def entry_records(self):
        """Every Entry (with its page and index in the page) in address order, zero-length
        ones dropped (as lookup() does)."""
        out = []
        for page in self.pages():
            items = page.entries
            for n, raw in enumerate(items):
                end = items[n + 1].function_offset if n + 1 < len(items) else page.end_offset
                if end > raw.function_offset:
                    out.append(Entry(self.image_base + raw.function_offset, self.image_base + end,
                                     raw.encoding, page_index=page.index, entry_index=n))
        return out

    def entries(self):
        """[(function_start, function_end, encoding)] in address order, zero-length dropped."""
        return [(e.function_start, e.function_end, e.encoding) for e in self.entry_records()]

    def decode(self, entry):
        """decode_encoding() of an Entry (or an encoding) for this image's arch."""
        encoding = entry.encoding if isinstance(entry, Entry) else entry
        return decode_encoding(encoding, self.arch)

    def row(self, entry, read_code=None):
        """to_row() of an Entry from lookup()."""
        return to_row(self.decode(entry), entry.function_start, self.arch, read_code,
                      entry.function_end)
