"""plugin.cache.BoundedCache: the plugin's one cache kind keeps its bound, its module
generation and its counts."""

import pytest

from plugin.cache import BoundedCache, caches_of, summed


def test_a_full_cache_starts_over_and_counts_hits_and_misses():
    cache = BoundedCache("rows", 3)
    computed = []

    def compute(key):
        computed.append(key)
        return None if key == 2 else key * 10     # None is an answer too
    for key in (1, 2, 1, 2, 3):
        assert cache.lookup(key, lambda: compute(key)) == (None if key == 2 else key * 10)
    assert computed == [1, 2, 3] and len(cache) == 3
    assert (cache.hits, cache.misses) == (2, 3)
    cache.lookup(4, lambda: compute(4))          # a fourth key: the cache is cleared first
    assert len(cache) == 1 and 4 in cache and 1 not in cache
    cache.put(4, 41)                             # an existing key does not clear it
    assert len(cache) == 1 and cache.get(4) == 41 and cache.get(5, "none") == "none"
    stats = cache.stats()
    assert (stats.name, stats.bound, stats.entries, stats.hits, stats.misses) == ("rows", 3, 1, 3, 5)
    assert stats.text() == "rows: 1 of 3 entries, 3 hits (38%), 5 misses"


def test_entries_are_kept_for_one_module_generation():
    cache = BoundedCache("plans", 10)
    cache.for_generation(1).put("pc", "plan")
    assert cache.for_generation(1).get("pc") == "plan"
    assert cache.for_generation(2).get("pc") is None and len(cache) == 0
    cache.put("pc", "new")
    cache.clear()
    assert len(cache) == 0 and cache.generation == 2 and (cache.hits, cache.misses) == (1, 1)


def test_a_cache_holds_at_least_one_entry():
    with pytest.raises(ValueError):
        BoundedCache("none", 0)


def test_a_hot_path_reads_the_dict_itself_and_entries_can_be_set_and_dropped():
    cache = BoundedCache("verdicts", 2)
    table = cache.backing()
    cache[1] = "one"                    # as put: counted nowhere, bounded
    cache[2] = "two"
    assert table == {1: "one", 2: "two"}
    cache[3] = "three"                  # full: cleared in place, the same dict
    assert cache.backing() is table and table == {3: "three"}
    cache.discard(3)
    cache.discard(4)                    # absent: nothing to do
    assert len(cache) == 0 and (cache.hits, cache.misses) == (0, 0)


def test_the_caches_in_declared_fields_are_found_and_summed_by_name():
    class Tables:
        def __init__(self, hits):
            self.rows = BoundedCache("rows", 8)
            self.rows.put("pc", "row")
            for _ in range(hits):
                self.rows.get("pc")
            self.rows.get("other")
            self.name = "not a cache"

    class Slotted:
        __slots__ = ("verdicts", "unset")

        def __init__(self):
            self.verdicts = BoundedCache("verdicts", 4)

    first, second, slotted = Tables(2), Tables(3), Slotted()
    caches = caches_of([first, None, second, slotted, first])
    assert caches == [first.rows, second.rows, slotted.verdicts]      # once each, in order
    rows, verdicts = summed(caches)
    assert (rows.name, rows.caches, rows.bound, rows.entries, rows.hits, rows.misses) == ("rows", 2, 16, 2, 5, 2)
    assert rows.text() == "rows (2 caches): 2 of 16 entries, 5 hits (71%), 2 misses"
    assert verdicts.as_json() == {"name": "verdicts", "caches": 1, "bound": 4, "entries": 0, "hits": 0,
                                  "misses": 0}
    assert verdicts.text() == "verdicts: 0 of 4 entries, 0 hits, 0 misses"
