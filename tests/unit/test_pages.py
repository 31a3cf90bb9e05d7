"""plugin/pages.py: the page cache gives the bytes a direct read gives, and reads each page once."""

import pytest

from plugin.errors import MemoryReadError
from plugin.pages import PAGE_SIZE, PageCache

BASE = 0x7ff000000000
READABLE = range(BASE, BASE + 3 * PAGE_SIZE - 100)      # the third page is readable only in part


class Memory:
    def __init__(self):
        self.calls = []

    def read(self, address, size):
        self.calls.append((address, size))
        if address not in READABLE or address + size - 1 not in READABLE:
            raise MemoryReadError(address, size, "unmapped")
        return bytes((a * 7) & 0xff for a in range(address, address + size))


@pytest.mark.parametrize("address,size", [(BASE, 8), (BASE + 8, 8), (BASE + PAGE_SIZE - 4, 8),
                                          (BASE + PAGE_SIZE + 16, 16), (BASE + 2 * PAGE_SIZE + 8, 8)])
def test_cached_reads_equal_direct_reads(address, size):
    memory = Memory()
    cache = PageCache(memory.read)
    assert cache.read(address, size) == Memory().read(address, size)
    assert cache.read(address, size) == Memory().read(address, size)


def test_each_page_is_read_once():
    memory = Memory()
    cache = PageCache(memory.read)
    for offset in range(0, 512, 8):
        cache.read(BASE + offset, 8)
    assert memory.calls == [(BASE, PAGE_SIZE)]
    cache.clear()
    cache.read(BASE, 8)
    assert len(memory.calls) == 2           # dropped: read again


def test_partly_unreadable_page_falls_back_to_direct_reads():
    memory = Memory()
    cache = PageCache(memory.read)
    at = BASE + 2 * PAGE_SIZE + 8           # readable, on a page whose end is not
    assert cache.read(at, 8) == Memory().read(at, 8)
    with pytest.raises(MemoryReadError):
        cache.read(BASE + 3 * PAGE_SIZE - 50, 8)
