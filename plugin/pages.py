"""A page cache over a target's memory reads, for an unwinder that reads the same stack pages
frame after frame. Its owner drops it whenever the debuggee may have changed (a stop, a
resume, a memory or register write, new modules): it never outlives what it copied."""
from __future__ import annotations

from plugin.errors import MemoryReadError

PAGE_SIZE = 4096
MAX_PAGES = 256         # 1 MiB: a deep stack's frames, and what the tables' code reads


class PageCache:
    def __init__(self, read_memory):
        self._read = read_memory        # (address, size) -> bytes, or raises MemoryReadError
        self._pages = {}                # page address -> bytes, or None when the page is not readable whole

    def clear(self):
        self._pages.clear()

    def read(self, address: int, size: int) -> bytes:
        page = address & ~(PAGE_SIZE - 1)
        offset = address - page
        if offset + size > PAGE_SIZE:
            return self._read(address, size)        # across pages: rare, read as asked
        data = self._pages.get(page, b"")
        if data == b"":
            if len(self._pages) >= MAX_PAGES:
                self._pages.clear()
            try:
                data = self._read(page, PAGE_SIZE)
            except MemoryReadError:
                data = None         # the page is partly unreadable (a guard page next door): read as asked
            self._pages[page] = data
        if data is None:
            return self._read(address, size)
        return data[offset:offset + size]
