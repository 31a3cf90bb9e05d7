"""The one kind of cache the plugin keeps: a dict with a declared bound and hit counts.

An unwinder asks the same questions again and again (the row at a pc, the
prologue model of a function, whether an address starts a signal
trampoline): every answer it remembers is kept in a BoundedCache, held in
a declared field of what owns it (UnwindContext, a table strategy, a
target, a debugger's unwinder state). A cache is cleared when it is full
(the answers are cheap to find again and deep stacks repeat only a few),
and, where its answers rest on the modules, when the owner's module
generation changes (`for_generation`), like framehop's rule cache. Its
hits and misses can be printed (`stats`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, Iterable, List, Optional

@dataclass(frozen=True)
class CacheStats:
    """What a cache holds and how often it answered."""
    name: str
    bound: int
    entries: int
    hits: int
    misses: int
    caches: int = 1     # how many caches of this name are summed up here (one per module, say)

    def text(self) -> str:
        asked = self.hits + self.misses
        rate = " (%.0f%%)" % (100.0 * self.hits / asked) if asked else ""
        name = self.name if self.caches == 1 else "%s (%d caches)" % (self.name, self.caches)
        return "%s: %d of %d entries, %d hits%s, %d misses" % (name, self.entries, self.bound, self.hits,
                                                               rate, self.misses)

    def as_json(self) -> dict:
        return {"name": self.name, "caches": self.caches, "bound": self.bound, "entries": self.entries,
                "hits": self.hits, "misses": self.misses}


class BoundedCache:
    """At most `bound` entries (cleared when full), optionally for one module generation."""

    def __init__(self, name: str, bound: int) -> None:
        if bound < 1:
            raise ValueError("a cache's bound is at least 1")
        self.name = name
        self.bound = bound
        self.generation: Optional[Hashable] = None
        self.hits = 0
        self.misses = 0
        self._entries: Dict[Hashable, Any] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def backing(self) -> Dict[Hashable, Any]:
        """The dict itself, for a hot path that reads it directly and counts its own hits (it is
        cleared in place, never replaced)."""
        return self._entries

    def discard(self, key: Hashable) -> None:
        """Forget key's entry, if there is one."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Drop every entry (the counts stay: they describe the session)."""
        self._entries.clear()

    def for_generation(self, generation: Hashable) -> "BoundedCache":
        """The cache, cleared first when its entries were made for another module generation."""
        if generation != self.generation:
            self._entries.clear()
            self.generation = generation
        return self

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The entry for key (a hit), or default (a miss)."""
        try:
            value = self._entries[key]
        except KeyError:
            self.misses += 1
            return default
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> Any:
        """Remember value for key (clearing the cache first when it is full); value."""
        if key not in self._entries and len(self._entries) >= self.bound:
            self._entries.clear()
        self._entries[key] = value
        return value

    __setitem__ = put

    def lookup(self, key: Hashable, compute: Callable[..., Any], *args: Any) -> Any:
        """The entry for key, computed by compute(*args) and remembered on a miss (None included).
        (Hits are the common case: a dict lookup, no closure made.)"""
        try:
            value = self._entries[key]
        except KeyError:
            self.misses += 1
            return self.put(key, compute(*args))
        self.hits += 1
        return value

    def stats(self) -> CacheStats:
        return CacheStats(self.name, self.bound, len(self._entries), self.hits, self.misses)


def caches_of(owners: Iterable[object]) -> List[BoundedCache]:
    """The BoundedCaches held in the declared fields of each owner (its attributes), in order."""
    found: List[BoundedCache] = []
    for owner in owners:
        if owner is None:
            continue
        found.extend(value for value in _fields(owner) if isinstance(value, BoundedCache) and value not in found)
    return found


def _fields(owner: object) -> List[Any]:
    fields = getattr(owner, "__dict__", None)
    if fields is not None:
        return list(fields.values())
    return [getattr(owner, name, None) for name in getattr(type(owner), "__slots__", ())]


def summed(caches: Iterable[BoundedCache]) -> List[CacheStats]:
    """Each name's stats, the caches of one name (one per module, say) summed, in first-seen order."""
    by_name: Dict[str, CacheStats] = {}
    for cache in caches:
        stats = cache.stats()
        seen = by_name.get(stats.name)
        if seen is not None:
            stats = CacheStats(stats.name, seen.bound + stats.bound, seen.entries + stats.entries,
                               seen.hits + stats.hits, seen.misses + stats.misses, seen.caches + 1)
        by_name[stats.name] = stats
    return list(by_name.values())
