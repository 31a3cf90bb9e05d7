"""Reading a command line against its declaration, in GDB's or LLDB's option style.

GDB style (`-json -sources LIST`, then words; a word that is a number is
never an option; `--` ends the options) is read by hand, as GDB's own
commands do. LLDB style (`--json/-j`, `--sources/-s LIST`, `--opt=value`,
`-c5`, `--` before words that look like options) with argparse. Both give a
Given, with the positional words already checked by the declaration; every
problem is a ValueError with a one-line message (ArgumentError for the
words, which the front-ends prefix with the command's name).
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from plugin.commands.spec import CommandSpec, Debugger, Option, OptionKind, convert
from plugin.engine import DEFAULT_SOURCES


@dataclass
class Given:
    """What a command line asked for."""
    json: bool = False
    sources: Tuple[str, ...] = ()
    count: Optional[int] = None
    all: bool = False
    verbose: bool = False
    steps: Optional[int] = None
    words: List[str] = field(default_factory=list)
    value: object = None        # the words' meaning (CommandSpec.check_words)


def _convert(option: Option, text: str) -> object:
    return convert(option, text, DEFAULT_SOURCES)      # sources: checked against those the engine has


def _is_number(word: str) -> bool:
    try:
        int(word, 0)
        return True
    except ValueError:
        return False


def parse_gdb(spec: CommandSpec, argv: Sequence[str], default_sources: Sequence[str]) -> Given:
    """GDB style; argv as gdb.string_to_argv splits it. default_sources: the current setting."""
    given = Given(sources=tuple(default_sources))
    options = {o.name: o for o in spec.options_for(Debugger.GDB)}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            given.words.extend(argv[i + 1:])
            break
        if word.startswith("-") and not _is_number(word):
            option = _gdb_option(options, word.lstrip("-"))
            if option is None:
                raise ValueError("unknown option %s (options: %s)" % (word, spec.describe_options(Debugger.GDB)))
            if option.kind is OptionKind.FLAG:
                setattr(given, option.name, True)
            else:
                if i + 1 >= len(argv):
                    raise ValueError("%s needs %s, e.g. %s %s" % (
                        option.spelled(Debugger.GDB), "a list" if option.kind is OptionKind.SOURCES else "a number",
                        option.spelled(Debugger.GDB), option.example or "5"))
                i += 1
                setattr(given, option.name, _convert(option, argv[i]))
        else:
            given.words.append(word)
        i += 1
    given.value = spec.check_words(Debugger.GDB, given.words, vars(given))
    return given


def _gdb_option(options, name: str) -> Optional[Option]:
    """GDB's rule: an option may be abbreviated to any unique prefix (`-j` for `-json`)."""
    if name in options:
        return options[name]
    matches = [o for n, o in options.items() if name and n.startswith(name)]
    if len(matches) > 1:
        raise ValueError("ambiguous option -%s: %s" % (name, ", ".join("-" + o.name for o in matches)))
    return matches[0] if matches else None


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError("%s (options: %s)" % (message, self.described))


def parse_lldb(spec: CommandSpec, command: str, default_sources: Sequence[str]) -> Given:
    """LLDB style; command is the raw text after the command's name."""
    try:
        argv = shlex.split(command or "")
    except ValueError as exc:
        raise ValueError("cannot split the arguments: %s" % exc) from None
    parser = _Parser(prog="unwind", add_help=False, allow_abbrev=False)
    parser.described = spec.describe_options(Debugger.LLDB)
    for option in spec.options_for(Debugger.LLDB):
        flags = ("-" + option.short, option.spelled(Debugger.LLDB))
        if option.kind is OptionKind.FLAG:
            parser.add_argument(*flags, dest=option.name, action="store_true")
        else:
            parser.add_argument(*flags, dest=option.name, type=_argparse_type(option),
                                metavar=option.metavar)
    parser.add_argument("words", nargs="*")
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit:          # argparse may still exit on its own; never let it reach LLDB
        raise ValueError("bad arguments %r (options: %s)" % (command, parser.described)) from None
    given = Given(sources=tuple(default_sources))
    for name, value in vars(args).items():
        if value is not None:
            setattr(given, name, value)
    given.value = spec.check_words(Debugger.LLDB, given.words, vars(given))
    return given


def _argparse_type(option: Option):
    def convert(text):
        try:
            return _convert(option, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = option.name      # argparse names the type in some messages
    return convert
