"""The registries, declared once: unwind sources and user settings.

Every front-end (GDB parameters, LLDB `unwind settings`, the offline
command line) and the engine read these; nothing else spells a source
list, a default, a bound or a setting's help.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping, Optional, Sequence, Tuple

from plugin.model.vocabulary import Vocabulary
from plugin.modules.module import ModuleFormat


class SourceKind(str, Enum):
    """Where a source's answer comes from, and so what GDB's own `bt` takes from it by default.
    PROOF and GUESS are the fallback sources: tried only where no table covers the frame."""
    TABLE = "table"          # an unwind table of the module (trusted where it covers the pc): claimed
    PROOF = "proof"          # the function's own code, read on every path from its start: claimed where it decides
    GUESS = "guess"          # the stack itself (a heuristic): claimed only with `set unwind guesses on`


class Trust(Vocabulary):
    """How a frame was found, from most to least reliable (after Breakpad's trust levels):
    the source's name, or `context` for the innermost frame. Each says its "found by" words."""
    CONTEXT = ("context", "given by the debugger (innermost frame)")
    CFI = ("cfi", "call frame info")
    SFRAME = ("sframe", "SFrame")
    COMPACT = ("compact", "compact unwind info")
    EXIDX = ("exidx", "ARM exception index")
    PDATA = ("pdata", "Windows unwind data")
    ORC = ("orc", "the kernel's ORC tables")
    ANALYSIS = ("analysis", "instruction analysis")
    FRAME_POINTER = ("frame-pointer", "frame pointer")
    SCAN = ("scan", "stack scanning")


@dataclass(frozen=True)
class Source:
    """One unwind source, declared once (the data part; its strategy and dump are bound in
    plugin/strategies/registry.py and plugin/render/tables.py: see docs/design.md,
    "How to add a source")."""
    name: Trust              # the name used everywhere: settings, options, JSON; its "found by" words
    kind: SourceKind
    description: str
    planned: bool = False    # its step ends in row_step.step_with_row: a per-pc plan may replay it (plugin/plans.py)
    gdb_sections: Tuple[str, ...] = ()   # its sections GDB's own DWARF unwinder reads (gdb_unwinder/claim.py)
    # (module format, source): in a module of that format it is tried just before that source
    # when both are on and the order puts it after (plugin/engine.py)
    goes_before: Optional[Tuple[ModuleFormat, "Trust"]] = None

    @property
    def trust(self) -> str:
        return self.name.description


# In the canonical order a frame tries them (see docs/design.md). `context` is not
# a source: it marks the innermost frame, whose registers the debugger gave.
SOURCES: Tuple[Source, ...] = (
    Source(Trust.CFI, SourceKind.TABLE, "DWARF CFI: .eh_frame, .debug_frame, __eh_frame",
           planned=True, gdb_sections=(".eh_frame", ".debug_frame")),
    Source(Trust.SFRAME, SourceKind.TABLE, "SFrame v1/v2/v3 (.sframe)", planned=True),
    Source(Trust.COMPACT, SourceKind.TABLE, "Apple compact unwind (__unwind_info)",
           goes_before=(ModuleFormat.MACHO, Trust.CFI)),     # Apple's unwinders read __unwind_info first
    Source(Trust.EXIDX, SourceKind.TABLE, "ARM EHABI (.ARM.exidx/.ARM.extab)"),
    # GDB on Linux reads no .pdata (and has no objfile for an image a loader mapped): no gdb_sections
    Source(Trust.PDATA, SourceKind.TABLE, "Windows unwind data of PE images (.pdata/.xdata, x64 and ARM64)"),
    Source(Trust.ORC, SourceKind.TABLE, "the Linux kernel's ORC tables (.orc_unwind_ip, .orc_unwind), in guest memory",
           goes_before=(ModuleFormat.KERNEL, Trust.CFI)),    # the kernel's only tables: no other source to try first
    Source(Trust.ANALYSIS, SourceKind.PROOF, "the function's instructions, read from its start to pc",
           planned=True),
    Source(Trust.FRAME_POINTER, SourceKind.GUESS, "the frame-pointer chain"),
    Source(Trust.SCAN, SourceKind.GUESS, "stack words that look like return addresses"),
)
CONTEXT = Trust.CONTEXT.value

SOURCE_BY_NAME = {s.name: s for s in SOURCES}
# (source, module format, the source it goes before there): Source.goes_before, by name
GOES_BEFORE: Tuple[Tuple[str, str, str], ...] = tuple(
    (s.name.value, s.goes_before[0], s.goes_before[1].value) for s in SOURCES if s.goes_before)
TRUST_WORDS = {member.value: member.description for member in Trust}


def source_names(kind=None, available=None, planned=None) -> Tuple[str, ...]:
    """Source names in canonical order, optionally of one kind (or a tuple of kinds), among `available`
    and (planned: True or False) those a per-pc plan may or may not replay."""
    kinds = (kind,) if isinstance(kind, SourceKind) else kind
    return tuple(s.name.value for s in SOURCES
                 if (kinds is None or s.kind in kinds) and (available is None or s.name in available)
                 and (planned is None or s.planned == planned))


def gdb_sections() -> Tuple[str, ...]:
    """The sections GDB's own DWARF unwinder reads, of every source (claim auto leaves their rows to GDB)."""
    return tuple(section for s in SOURCES for section in s.gdb_sections)


FALLBACK_KINDS = (SourceKind.PROOF, SourceKind.GUESS)      # tried only where no table covers the frame


def is_fallback(name: str) -> bool:
    """Does the source answer only where no table covers the frame (it reads code or the stack)?"""
    source = SOURCE_BY_NAME.get(name)
    return source is not None and source.kind in FALLBACK_KINDS


def kind_of(name: str) -> Optional[SourceKind]:
    """The kind of the source called name (None: `context` or no source)."""
    source = SOURCE_BY_NAME.get(name)
    return source.kind if source is not None else None


def is_guess(name: str) -> bool:
    """Does the source guess (GDB's bt takes its frames only with `set unwind guesses on`)?"""
    source = SOURCE_BY_NAME.get(name)
    return source is not None and source.kind == SourceKind.GUESS


def source_lines(available: Sequence[str]) -> str:
    """One line per source of `available`, in that order: its name and what it reads (help texts;
    GDB completes no value of a string parameter, so `help set unwind sources` lists them)."""
    width = max(len(name) for name in available)
    return "\n".join("  %-*s  %s" % (width, name, SOURCE_BY_NAME[name].description) for name in available)


def parse_sources(text: str, available=None) -> Tuple[str, ...]:
    """Validate a comma-separated source list; returns a tuple or raises ValueError."""
    available = tuple(available or source_names())
    names = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    if not names:
        raise ValueError("no sources given; choose from: %s" % ", ".join(available))
    for name in names:
        if name not in available:
            raise ValueError("unknown source %r; choose from: %s" % (name, ", ".join(available)))
    repeated = sorted({name for name in names if names.count(name) > 1}, key=names.index)
    if repeated:
        raise ValueError("source %s named twice; name each source once, in order" % ", ".join(repeated))
    return tuple(names)


class SettingType(str, Enum):
    """What a setting holds; decides how its text is read and shown."""
    SOURCES = "sources"      # a comma-separated source list, in order
    UNSIGNED = "unsigned"    # a whole number within the setting's bounds
    BOOLEAN = "boolean"      # on or off
    CHOICE = "choice"        # one word of the setting's choices
    NAMES = "names"          # function names, separated by commas or spaces (none: empty)


class SettingError(ValueError):
    """A value a setting does not take: `str()` names the setting, `problem` does not."""

    def __init__(self, setting: str, problem: str):
        super().__init__("%s %s" % (setting, problem))
        self.problem = problem


UNLIMITED = 2 ** 63 - 1         # what `unlimited` stores for a count with no maximum (max-frames)
_SYNTAX = {SettingType.SOURCES: "LIST", SettingType.UNSIGNED: "N", SettingType.BOOLEAN: "on|off",
           SettingType.CHOICE: "WORD", SettingType.NAMES: "NAME,..."}
_TRUE, _FALSE = ("on", "1", "yes", "true", "enable"), ("off", "0", "no", "false", "disable")


@dataclass(frozen=True)
class Setting:
    """One user setting: GDB `set unwind NAME`, LLDB `unwind settings NAME`."""
    name: str
    type: SettingType
    default: object          # None for SOURCES: every source the engine has, in canonical order
    help: str                # a clause: "whether ...", "how many ..."; help texts of both debuggers use it
    minimum: Optional[int] = None
    maximum: Optional[int] = None
    debuggers: Tuple[str, ...] = ("gdb", "lldb")
    shown: str = ""          # GDB's `show unwind NAME` sentence; {value} is the value's words
    words: Tuple[str, str] = ("off", "on")     # BOOLEAN: the words {value} becomes for off, on
    requires: Tuple[str, ...] = ()             # exists only when one of these sources is built
    attribute: str = ""      # the attribute of a settings store (default: NAME with "_"); also the JSON key
    on_target: bool = False  # GDB keeps it on the Target, where every UnwindContext reads it
    notes: Mapping[str, str] = field(default_factory=dict)    # debugger -> what only its help says
    choices: Tuple[Tuple[str, str], ...] = ()  # CHOICE: (word, what it means), the default first
    aliases: Tuple[str, ...] = ()              # older names that set and show the same value

    @property
    def key(self) -> str:
        return self.attribute or self.name.replace("-", "_")

    @property
    def syntax(self) -> str:
        """The placeholder of its value in usage lines: LIST, N, on|off, auto|all|none."""
        if self.type == SettingType.CHOICE:
            return "|".join(word for word, _ in self.choices)
        return _SYNTAX[self.type]

    def default_value(self, available: Sequence[str]) -> object:
        return tuple(available) if self.type == SettingType.SOURCES and self.default is None else self.default

    def bounds(self) -> str:
        """"of at least 1, or unlimited", "from 1 to 1048576" (UNSIGNED only)."""
        if self.maximum is None:
            return "of at least %d, or unlimited" % (self.minimum or 0)
        return "from %d to %d" % (self.minimum or 0, self.maximum)

    def in_bounds(self, value: int) -> bool:
        return (self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)

    def parse(self, text: str, available: Sequence[str]) -> object:
        """The value `text` means; ValueError (one line, naming the setting) if it means none."""
        if self.type == SettingType.SOURCES:
            return parse_sources(text, available)
        if self.type == SettingType.NAMES:
            return tuple(dict.fromkeys(text.replace(",", " ").split()))
        if self.type == SettingType.BOOLEAN:
            word = text.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise SettingError(self.name, "must be on or off, not %r" % text)
        if self.type == SettingType.CHOICE:
            word = text.strip().lower()
            if word in dict(self.choices):
                return word
            raise SettingError(self.name, "must be one of %s, not %r" % (", ".join(w for w, _ in self.choices), text))
        if self.maximum is None and text.strip().lower() == "unlimited":
            return UNLIMITED
        try:
            value = int(text.strip(), 0)
        except ValueError:
            value = None
        if value is None or not self.in_bounds(value):
            raise SettingError(self.name, "must be a whole number %s, not %r" % (self.bounds(), text))
        return value

    def format(self, value: object) -> str:
        """The value as `parse` takes it back: "cfi,scan", "20000", "on"."""
        if self.type in (SettingType.SOURCES, SettingType.NAMES):
            return ",".join(value)
        if self.type == SettingType.BOOLEAN:
            return "on" if value else "off"
        if self.type == SettingType.UNSIGNED and self.maximum is None and value >= UNLIMITED:
            return "unlimited"
        return str(value)

    def describe(self, available: Sequence[str]) -> str:
        """Its help with what values it takes, for help texts."""
        if self.type == SettingType.SOURCES:
            return "%s (comma-separated: %s)" % (self.help, ", ".join(available))
        if self.type == SettingType.UNSIGNED:
            if self.maximum is None:
                return "%s (at least %d, or unlimited)" % (self.help, self.minimum or 0)
            return "%s (%d to %d)" % (self.help, self.minimum or 0, self.maximum)
        if self.type == SettingType.CHOICE:
            return "%s: %s" % (self.help, "; ".join("%s: %s" % choice for choice in self.choices))
        if self.type == SettingType.NAMES:
            return "%s (function names, separated by commas or spaces; empty for none)" % self.help
        return "%s (on or off)" % self.help

    def show(self, value: object, available: Sequence[str]) -> str:
        """GDB's `show` sentence for a value."""
        if self.type == SettingType.BOOLEAN:
            return self.shown.format(value=self.words[bool(value)])
        if self.type == SettingType.NAMES and not value:
            return self.shown.format(value="none")
        text = self.shown.format(value=self.format(value))
        if self.type == SettingType.CHOICE and value in dict(self.choices):
            text = "%s (%s)." % (text.rstrip("."), dict(self.choices)[value])
        if self.type == SettingType.SOURCES:
            off = [name for name in available if name not in value]
            if off:
                text += " Off: %s." % ", ".join(off)
        return text


DEFAULT_MAX_FRAMES = 20000
DEFAULT_SCAN_WORDS = 1024      # stack words the `scan` source reads above sp, per frame
MAX_SCAN_WORDS = 1 << 20

# In the order help texts and `unwind settings` list them.
SETTINGS: Tuple[Setting, ...] = (
    Setting("sources", SettingType.SOURCES, None,
            "the unwind sources every frame tries, in this order; a source not listed is off",
            shown="The unwind sources, in order, are {value}.",
            notes={"gdb": "Used by GDB's backtrace (tables and analysis; frame-pointer and scan only with\n"
                          "\"set unwind guesses on\") and as the default of every \"unwind\" command."}),
    Setting("max-frames", SettingType.UNSIGNED, DEFAULT_MAX_FRAMES,
            "the most frames a walk recovers before it stops with depth-limit", minimum=1,
            shown="An unwind walk stops after {value} frames."),
    Setting("scan-words", SettingType.UNSIGNED, DEFAULT_SCAN_WORDS,
            "how many stack words above sp the scan source reads per frame",
            minimum=1, maximum=MAX_SCAN_WORDS, requires=("scan",), on_target=True,
            shown="The scan source reads {value} stack words per frame."),
    Setting("guesses", SettingType.BOOLEAN, False,
            "whether the debugger's own bt may use frames the plugin guesses: frame-pointer chains and stack scan",
            requires=source_names(SourceKind.GUESS), attribute="claim_guesses",
            shown="GDB's backtrace {value} the plugin's guesses (frame-pointer chains, stack scan).",
            words=("does not use", "uses"), aliases=("fallback",),
            notes={"gdb": "Off by default: a guess may be wrong where GDB's own heuristics are right, so\n"
                          "GDB's bt takes by default only what the plugin proves (tables GDB does not read,\n"
                          "code read instruction by instruction where the analysis decided, signal frames).\n"
                          "A guess yields to GDB's own prologue analyser where that gives another caller.\n"
                          "\"set unwind fallback\" is its old name.",
                   "lldb": "Off by default: LLDB 22's bt (the frame provider, \"unwind provider\") gets the\n"
                           "plugin's frames only up to its first guess. The unwind commands always show\n"
                           "the plugin's whole walk, whatever this says."}),
    Setting("claim", SettingType.CHOICE, "auto",
            "which frames GDB's own backtrace takes from the plugin's unwinder", debuggers=("gdb",),
            choices=(("auto", "every frame the plugin proves and GDB's own unwinders do not give: tables GDB "
                              "does not read (SFrame, compact unwind, tables only in memory, modules GDB has no "
                              "objfile for, signed return addresses GDB cannot strip), code without tables read "
                              "instruction by instruction where the analysis decided and GDB's prologue "
                              "analyser gives another caller, signal frames, trap handlers; guesses only with "
                              "\"set unwind guesses on\""),
                     ("all", "every frame the plugin recovers"),
                     ("none", "no frame")),
            shown="GDB's backtrace takes from the unwind plugin: {value}.",
            notes={"gdb": "The unwind commands always show the plugin's own walk, whatever this says."}),
    Setting("trap-handler-names", SettingType.NAMES, (),
            "the functions entered by a planted return address rather than a call (trap handlers, "
            "signal-return trampolines): their frames, and the frames they return to, are looked up "
            "at their exact pc, not pc-1", debuggers=("gdb",), on_target=True,
            shown="Functions looked up as trap handlers: {value}.",
            notes={"gdb": "The same list as LLDB's \"settings set target.trap-handler-names\", which the "
                          "plugin reads in LLDB."}),
)
SETTING_BY_NAME = {s.name: s for s in SETTINGS}


def settings_for(debugger: str, available: Sequence[str]) -> Tuple[Setting, ...]:
    """The settings one debugger offers when the engine has the sources `available`."""
    return tuple(s for s in SETTINGS if debugger in s.debuggers
                 and (not s.requires or any(name in available for name in s.requires)))


def find_setting(name: str, offered: Sequence[Setting]) -> Setting:
    """The setting called `name` (or once called so) among `offered`; ValueError naming the choices otherwise."""
    for setting in offered:
        if setting.name == name or name in setting.aliases:
            return setting
    raise ValueError("unknown setting %r; the settings are: %s" % (name, ", ".join(s.name for s in offered)))
