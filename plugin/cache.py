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
from typing import Any, Callable, Dict, Hashable, Optional

@dataclass(frozen=True)
class CacheStats:
    """What a cache holds and how often it answered."""
    name: str
    bound: int
    entries: int
    hits: int
    misses: int

    def text(self) -> str:
        asked = self.hits + self.misses
        rate = " (%.0f%%)" % (100.0 * self.hits / asked) if asked else ""
        return "%s: %d of %d entries, %d hits%s, %d misses" % (self.name, self.entries, self.bound, self.hits,
                                                               rate, self.misses)


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
