"""The registries, declared once: unwind sources and user settings.

Every front-end (GDB parameters, LLDB `unwind settings`, the offline
command line) and the engine read these; nothing else spells a source
list, a default, a bound or a setting's help.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Tuple


class SourceKind(str, Enum):
    """Where a source's answer comes from."""
    TABLE = "table"          # an unwind table of the module (trusted where it covers the pc)
    FALLBACK = "fallback"    # the stack itself (a heuristic: tried only where no table covers the frame)


@dataclass(frozen=True)
class Source:
    name: str                # the name used everywhere: settings, options, JSON
    kind: SourceKind
    trust: str               # "found by" words, after Breakpad's trust levels
    description: str


# In the canonical order a frame tries them (see DESIGN.md). `context` is not
# a source: it marks the innermost frame, whose registers the debugger gave.
SOURCES: Tuple[Source, ...] = (
    Source("cfi", SourceKind.TABLE, "call frame info", "DWARF CFI: .eh_frame, .debug_frame, __eh_frame"),
    Source("sframe", SourceKind.TABLE, "SFrame", "SFrame v1/v2/v3 (.sframe)"),
    Source("compact", SourceKind.TABLE, "compact unwind info", "Apple compact unwind (__unwind_info)"),
    Source("exidx", SourceKind.TABLE, "ARM exception index", "ARM EHABI (.ARM.exidx/.ARM.extab)"),
    Source("frame-pointer", SourceKind.FALLBACK, "frame pointer", "the frame-pointer chain"),
    Source("scan", SourceKind.FALLBACK, "stack scanning", "stack words that look like return addresses"),
)
CONTEXT = "context"
CONTEXT_TRUST = "given by the debugger (innermost frame)"

SOURCE_BY_NAME = {s.name: s for s in SOURCES}
TRUST_WORDS = {CONTEXT: CONTEXT_TRUST, **{s.name: s.trust for s in SOURCES}}


def source_names(kind: Optional[SourceKind] = None, available=None) -> Tuple[str, ...]:
    """Source names in canonical order, optionally of one kind and among `available`."""
    return tuple(s.name for s in SOURCES
                 if (kind is None or s.kind == kind) and (available is None or s.name in available))


def is_fallback(name: str) -> bool:
    source = SOURCE_BY_NAME.get(name)
    return source is not None and source.kind == SourceKind.FALLBACK


def parse_sources(text: str, available=None) -> Tuple[str, ...]:
    """Validate a comma-separated source list; returns a tuple or raises ValueError."""
    available = tuple(available or source_names())
    names = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    if not names:
        raise ValueError("no sources given; choose from: %s" % ", ".join(available))
    for name in names:
        if name not in available:
            raise ValueError("unknown source %r; choose from: %s" % (name, ", ".join(available)))
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Setting:
    """One user setting: GDB `set unwind NAME`, LLDB `unwind settings NAME`."""
    name: str
    type: str                # "sources", "unsigned", "boolean"
    default: object
    help: str
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    debuggers: Tuple[str, ...] = ("gdb", "lldb")


DEFAULT_MAX_FRAMES = 20000
DEFAULT_SCAN_WORDS = 1024      # stack words the `scan` source reads above sp, per frame
MAX_SCAN_WORDS = 1 << 20

SETTINGS: Tuple[Setting, ...] = (
    Setting("sources", "sources", None,
            "the unwind sources every frame tries, in this order; a source not listed is off"),
    Setting("max-frames", "unsigned", DEFAULT_MAX_FRAMES,
            "a walk stops with depth-limit after this many frames", minimum=1),
    Setting("scan-words", "unsigned", DEFAULT_SCAN_WORDS,
            "how many stack words above sp the scan source reads per frame",
            minimum=1, maximum=MAX_SCAN_WORDS),
    Setting("fallback", "boolean", False,
            "whether GDB's own bt may use frame-pointer and stack-scan frames", debuggers=("gdb",)),
    Setting("claim", "enum", "auto", "which frames GDB's bt takes from the plugin: auto (only where GDB's own DWARF unwinder cannot), all, none", debuggers=("gdb",)),
)
SETTING_BY_NAME = {s.name: s for s in SETTINGS}
