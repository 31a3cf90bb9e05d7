"""plugin.memory.PageCache: whole pages per target read, the target's own errors, a bound.

Pages here are smaller than a real page (plugin.memory.PAGE), as a remote
target's are: each is read with the next one of its real page."""

import pytest

from plugin import memory as memory_module
from plugin.errors import MemoryReadError
from plugin.memory import PageCache

PAGE = 0x100
MAPPED = (0x1000, 0x1380)        # readable bytes; the page at 0x1300 is readable only in part


class Memory:
    def __init__(self, mapped=MAPPED):
        self.calls = []
        self.mapped = mapped

    def read(self, address, size):
        self.calls.append((address, size))
        if address < self.mapped[0] or address + size > self.mapped[1]:
            raise MemoryReadError(address, size, "not mapped")
        return bytes((a * 7) & 0xFF for a in range(address, address + size))


def test_words_on_one_page_cost_one_read_and_equal_the_target():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE)
    for address in range(0x1000, 0x10F9, 8):
        assert cache.read(address, 8) == Memory().read(address, 8)
    assert memory.calls == [(0x1000, 2 * PAGE)]


def test_a_read_across_two_pages_joins_them():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE)
    assert cache.read(0x10FC, 8) == Memory().read(0x10FC, 8)
    assert memory.calls == [(0x1000, 2 * PAGE)]         # the page above came with it


def test_a_page_that_cannot_be_read_whole_is_read_as_asked():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE)
    assert cache.read(0x1370, 8) == Memory().read(0x1370, 8)        # the page 0x1300-0x1400 ends unmapped
    assert cache.read(0x1378, 8) == Memory().read(0x1378, 8)
    # the pair, then the page alone, are tried once; then the target is read as asked
    assert memory.calls == [(0x1300, 2 * PAGE), (0x1300, PAGE), (0x1370, 8), (0x1378, 8)]
    with pytest.raises(MemoryReadError) as error:
        cache.read(0x137C, 8)
    assert (error.value.address, error.value.size) == (0x137C, 8)     # the target's own error


def test_clear_drops_every_page_and_big_reads_go_straight_through():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE)
    cache.read(0x1000, 8)
    cache.clear()
    cache.read(0x1000, 8)
    cache.read(0x1000, 3 * PAGE)
    assert memory.calls == [(0x1000, 2 * PAGE), (0x1000, 2 * PAGE), (0x1000, 3 * PAGE)]


def test_the_cache_holds_at_most_max_pages():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE, max_pages=2)
    for address in (0x1000, 0x1100, 0x1200, 0x1000):
        cache.read(address, 8)
    assert len(cache._pages) <= 2
    assert memory.calls[-1] == (0x1000, 2 * PAGE)      # dropped when the cache started over


def test_resize_reads_the_new_size_from_then_on_and_drops_what_was_kept():
    memory = Memory()
    cache = PageCache(memory.read, page=PAGE)
    cache.read(0x1008, 8)
    cache.resize(PAGE // 4)
    assert cache.read(0x1008, 8) == Memory().read(0x1008, 8)
    cache.resize(PAGE // 4)         # the same size: what is kept stays
    cache.read(0x1010, 8)
    assert memory.calls == [(0x1000, 2 * PAGE), (0x1000, PAGE // 2)]


def test_a_small_page_is_read_with_the_next_one_of_its_real_page_only():
    """A page smaller than a real page is read with the next one where that one lies in the same real
    page and is not kept: the last of a real page alone (the next real page may be unmapped), one
    whose next page is kept alone. What each read gives equals the target's bytes."""
    real = memory_module.PAGE
    memory = Memory(mapped=(real, 3 * real))
    small = real // 4
    cache = PageCache(memory.read, page=small)
    for address in (real + 8, real + 3 * small + 8, real + 2 * small + 8, real + small + 8, 2 * real + 8):
        assert cache.read(address, 8) == Memory(mapped=(real, 3 * real)).read(address, 8)
    assert memory.calls == [(real, 2 * small),               # with the one above it
                            (real + 3 * small, small),       # the last small page of its real page: alone
                            (real + 2 * small, small),       # the next one kept already: alone
                            (2 * real, 2 * small)]           # (real + small came with the first)
    assert cache.read(real + small - 4, 8) == Memory(mapped=(real, 3 * real)).read(real + small - 4, 8)
    assert len(memory.calls) == 4
