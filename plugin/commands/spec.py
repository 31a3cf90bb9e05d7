"""The `unwind` commands, declared once: options, positional words, checks, help, JSON shape.

The GDB front-end (gdb_unwinder/commands.py) and the LLDB one
(lldb_commands/commands.py) build their commands from COMMANDS, and spell
options each in its debugger's style: GDB `-json -sources LIST`, LLDB
`--json/-j --sources/-s LIST`. A new command is one CommandSpec here plus
what it computes (a function in reports.py) and one `run` per debugger.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from plugin.settings import parse_sources, settings_for


class Debugger(str, Enum):
    GDB = "gdb"
    LLDB = "lldb"

    @property
    def title(self) -> str:
        return "GDB" if self is Debugger.GDB else "LLDB"


BOTH = (Debugger.GDB, Debugger.LLDB)


class ArgumentError(ValueError):
    """Bad positional words: shown as one line naming the command (`unwind explain: ...`)."""


class OptionKind(str, Enum):
    FLAG = "flag"            # present or not
    SOURCES = "sources"      # takes a source list (plugin.settings.parse_sources)
    COUNT = "count"          # takes a positive whole number


@dataclass(frozen=True)
class Option:
    name: str                # long name: GDB `-NAME`, LLDB `--NAME`
    short: str               # LLDB's one-letter form
    kind: OptionKind
    help: str
    metavar: Optional[str] = None
    debuggers: Tuple[Debugger, ...] = BOTH
    example: str = ""        # GDB: a value to show when the option is given without one

    def spelled(self, debugger: Debugger) -> str:
        return ("-" if debugger is Debugger.GDB else "--") + self.name

    def described(self, debugger: Debugger) -> str:
        """GDB `-sources LIST`; LLDB `--sources/-s LIST`, as error messages list options."""
        word = self.spelled(debugger)
        if debugger is Debugger.LLDB:
            word += "/-" + self.short
        return word + (" " + self.metavar if self.metavar else "")

    def help_name(self, debugger: Debugger) -> str:
        """GDB `-sources LIST`; LLDB `-s, --sources LIST`, as help texts list options."""
        word = self.spelled(debugger)
        if debugger is Debugger.LLDB:
            word = "-%s, %s" % (self.short, word)
        return word + (" " + self.metavar if self.metavar else "")


OPTIONS: Dict[str, Option] = {o.name: o for o in (
    Option("json", "j", OptionKind.FLAG, "print JSON instead of text"),
    Option("sources", "s", OptionKind.SOURCES, "comma-separated unwind sources, in order", "LIST",
           example="cfi,frame-pointer"),
    Option("count", "c", OptionKind.COUNT, "stop after N frames", "N", debuggers=(Debugger.LLDB,)),
    Option("verbose", "v", OptionKind.FLAG, "also show the raw DWARF operations of each expression"),
    Option("all", "a", OptionKind.FLAG, "every entry of every module instead of one address",
           debuggers=(Debugger.LLDB,)),
    Option("steps", "n", OptionKind.COUNT, "step at most N instructions", "N", example="20000"),
)}

VALIDATE_STEPS = 5000        # `unwind validate` steps at most this many instructions unless -steps says


class WordsKind(str, Enum):
    """What a command's positional words mean, and so how they are checked."""
    NONE = "none"                # none allowed
    COUNT = "count"              # [N]: a positive frame count
    LEVEL = "level"              # [LEVEL|all]: a physical frame level, or every frame
    EXPRESSION = "expression"    # ADDRESS|FUNCTION: the rest of the line, for the debugger to evaluate
    SETTING = "setting"          # [NAME [VALUE]]: a setting, and a new value for it
    OPTIONAL_EXPRESSION = "optional-expression"     # [ADDRESS|FUNCTION]: as EXPRESSION, or nothing
    SWITCH = "switch"            # [on|off]: turn something on or off, or show whether it is
    THREADS_COUNT = "threads-count"     # [all] [N|-N]: every thread (LLDB's `bt all`), a frame count


@dataclass(frozen=True)
class Words:
    kind: WordsKind
    metavar: str = ""            # in usage lines
    debuggers: Tuple[Debugger, ...] = BOTH


NO_WORDS = Words(WordsKind.NONE)


@dataclass(frozen=True)
class CommandSpec:
    name: str
    summary: str                 # one line: GDB's first doc line, LLDB's short help
    options: Tuple[str, ...]     # names in OPTIONS, in usage order (each used where its debuggers allow)
    words: Tuple[Words, ...] = (NO_WORDS,)      # at most one per debugger
    about: str = ""              # the help's body; see catalog.py for the {placeholders} filled in
    notes: Mapping[Debugger, str] = field(default_factory=dict)    # what only one debugger's help says
    json_keys: Tuple[str, ...] = ()      # the keys of the object `--json` prints, always
    json_sometimes: Mapping[str, str] = field(default_factory=dict)    # key -> when it is there too
    debuggers: Tuple[Debugger, ...] = BOTH

    def options_for(self, debugger: Debugger) -> Tuple[Option, ...]:
        return tuple(OPTIONS[n] for n in self.options if debugger in OPTIONS[n].debuggers)

    def words_for(self, debugger: Debugger) -> Words:
        for words in self.words:
            if debugger in words.debuggers:
                return words
        return NO_WORDS

    def usage(self, debugger: Debugger) -> str:
        """`unwind explain [-json] [-sources LIST] [LEVEL|all]` in the debugger's option style."""
        parts = ["unwind", self.name]
        parts += ["[%s%s]" % (o.spelled(debugger), " " + o.metavar if o.metavar else "")
                  for o in self.options_for(debugger)]
        metavar = self.words_for(debugger).metavar
        return " ".join(parts + ([metavar] if metavar else []))

    def option_help(self, debugger: Debugger) -> str:
        return "\n".join("  %-22s %s" % (o.help_name(debugger), o.help) for o in self.options_for(debugger))

    def describe_options(self, debugger: Debugger) -> str:
        """`-json -sources` (GDB) or `--json/-j, --sources/-s LIST` (LLDB), for error messages."""
        if debugger is Debugger.GDB:
            return " ".join(o.spelled(debugger) for o in self.options_for(debugger))
        return ", ".join(o.described(debugger) for o in self.options_for(debugger)) or "none"

    def body(self, debugger: Debugger, sources: Sequence[str]) -> str:
        """The help's text after the usage and options, in the debugger's words."""
        fill = {name: option.spelled(debugger) for name, option in OPTIONS.items()}
        fill.update(debugger=debugger.title, source_names=", ".join(sources),
                    settings=settings_help(debugger, sources))
        text = "\n".join(part for part in (self.about, self.notes.get(debugger, "")) if part)
        text = text.format(**fill)
        keys = list(self.json_shape(debugger, sources))
        keys += ["%s (%s)" % item for item in self.json_sometimes.items()]
        if keys:
            text += "\n%s prints an object with: %s." % (OPTIONS["json"].spelled(debugger), ", ".join(keys))
        return text

    def json_shape(self, debugger: Debugger, sources: Sequence[str]) -> Tuple[str, ...]:
        """The keys the object `--json` prints always has (for `settings`, one per setting)."""
        if self.words_for(debugger).kind is WordsKind.SETTING:
            return tuple(s.key for s in settings_for(debugger.value, sources))
        return self.json_keys

    def title(self, debugger: Debugger, sources: Sequence[str]) -> str:
        """The one-line summary in the debugger's words."""
        names = ", ".join(s.name for s in settings_for(debugger.value, sources))
        return self.summary.format(debugger=debugger.title, setting_names=names)

    def help(self, debugger: Debugger, sources: Sequence[str]) -> str:
        """Usage, options and body: what `help unwind NAME` shows below the summary."""
        return "Usage: %s\n\nOptions:\n%s\n\n%s\n" % (self.usage(debugger), self.option_help(debugger),
                                                       self.body(debugger, sources).strip())

    def check_words(self, debugger: Debugger, words: List[str],
                    given: Mapping[str, object]) -> Union[None, int, str, List[str]]:
        """The positional words' meaning, or ArgumentError (one line, without the command name).

        COUNT gives an int or None, LEVEL an int, "all" or None, EXPRESSION the
        joined text or None (with --all), SETTING the words themselves.
        """
        kind = self.words_for(debugger).kind
        if kind is WordsKind.NONE:
            if words:
                count = OPTIONS["count"]
                hint = " (use %s %s to limit frames)" % (count.spelled(debugger), count.metavar) \
                    if count in self.options_for(debugger) else ""
                raise ArgumentError("unexpected argument %r%s" % (" ".join(words), hint))
            return None
        if kind is WordsKind.COUNT:
            return frame_count(words)
        if kind is WordsKind.LEVEL:
            return level_or_all(words)
        if kind is WordsKind.OPTIONAL_EXPRESSION:
            return " ".join(words) if words else None
        if kind is WordsKind.SWITCH:
            return on_or_off(words)
        if kind is WordsKind.THREADS_COUNT:
            if words and words[0] == "all":
                return EveryThread(frame_count(words[1:]))
            return frame_count(words)
        if kind is WordsKind.EXPRESSION:
            every = OPTIONS["all"]
            if given.get("all"):
                if words:
                    raise ArgumentError("give either %s or an ADDRESS|FUNCTION, not both" % every.spelled(debugger))
                return None
            if not words:
                alternative = " (or %s)" % every.spelled(debugger) if every in self.options_for(debugger) else ""
                raise ArgumentError("give an ADDRESS or FUNCTION, e.g. \"unwind %s main\"%s"
                                    % (self.name, alternative))
            return " ".join(words)
        return list(words)


@dataclass(frozen=True)
class EveryThread:
    """`all` before a frame count: every thread's backtrace (count as frame_count gives it)."""
    count: Optional[int] = None


def settings_help(debugger: Debugger, sources: Sequence[str]) -> str:
    """One entry per setting the debugger offers: `  max-frames N      what it does (bounds)`."""
    return "\n".join(textwrap.fill(s.describe(sources), 79, initial_indent="  %-17s" % ("%s %s" % (s.name, s.syntax)),
                                   subsequent_indent=" " * 19, break_on_hyphens=False)
                     for s in settings_for(debugger.value, sources))


def _whole(word: str) -> Optional[int]:
    try:
        return int(word, 0)
    except ValueError:
        return None


def frame_count(words: Sequence[str]) -> Optional[int]:
    """[N]: the innermost N frames (N > 0), the outermost -N (N < 0, as GDB's `bt -N`), or None."""
    if not words:
        return None
    count = _whole(words[0]) if len(words) == 1 else None
    if count is None or count == 0:
        raise ArgumentError("expected a frame count N (innermost N) or -N (outermost N), got %r" % " ".join(words))
    return count


def level_or_all(words: Sequence[str]) -> Union[None, int, str]:
    """[LEVEL|all]: a physical frame level, "all", or None (the selected frame)."""
    if len(words) > 1:
        raise ArgumentError("expected one LEVEL or \"all\", got %r" % " ".join(words))
    if not words or words[0] == "all":
        return words[0] if words else None
    level = _whole(words[0])
    if level is None or level < 0:
        raise ArgumentError("LEVEL must be a frame number or \"all\", not %r" % words[0])
    return level


def on_or_off(words: Sequence[str]) -> Optional[bool]:
    """[on|off]: True, False, or None (show the state)."""
    if not words:
        return None
    if len(words) == 1 and words[0] in ("on", "off"):
        return words[0] == "on"
    raise ArgumentError("expected \"on\" or \"off\", got %r" % " ".join(words))


def convert(option: Option, text: str, available: Sequence[str]) -> object:
    """The value of an option that takes one: a source list (checked against `available`) or a count."""
    if option.kind is OptionKind.SOURCES:
        return parse_sources(text, available)
    return positive(text)


def positive(text: str) -> int:
    """The value of a COUNT option."""
    value = _whole(text)
    if value is None or value <= 0:
        raise ValueError("expected a positive number, not %r" % text)
    return value
