"""The `unwind` subcommands as LLDB parsed commands (LLDB 19 and later).

LLDB 16 offers Python only raw commands (`command script add -c`): LLDB
shows "Syntax: backtrace" and "Expects 'raw' input" in their help, and
completes nothing after the subcommand's name. From LLDB 18 on, a Python
class can declare its options and arguments (`command script add -p`,
lldb.plugins.parsed_cmd): LLDB then prints a real syntax line and the
options in `help`, completes option names, frame indexes and symbols, and
(LLDB 20 and later) asks the class to complete option values and arguments:
source names after --sources, setting names and values, on/off.

The declarations are the same (plugin/commands/catalog.py). LLDB parses the
line; the options and words it found are then read by the same
plugin.commands.options.parse_lldb as on LLDB 16, so checks, messages and
results do not depend on the version. A negative count needs `--` here
(`unwind backtrace -- -3`): LLDB reads `-3` as an option.
"""
from __future__ import annotations

import shlex

import lldb

from plugin.commands.spec import Debugger, OptionKind, WordsKind
from plugin.engine import DEFAULT_SOURCES
from plugin.settings import SettingType, find_setting

from . import base, commands
from .state import SETTINGS
from .subcommands import SUBCOMMANDS

LLDB = Debugger.LLDB

# How LLDB names and completes each kind of value: the arg types LLDB's help prints.
VALUE_TYPES = {OptionKind.SOURCES: lldb.eArgTypeName, OptionKind.COUNT: lldb.eArgTypeCount}
# The arguments each kind of positional words declares: [(arg type, repeat)].
ARGUMENTS = {
    WordsKind.NONE: [],
    WordsKind.COUNT: [(lldb.eArgTypeCount, "optional")],
    WordsKind.THREADS_COUNT: [(lldb.eArgTypeThreadIndex, "optional"), (lldb.eArgTypeCount, "optional")],
    WordsKind.LEVEL: [(lldb.eArgTypeFrameIndex, "optional")],
    WordsKind.EXPRESSION: [(lldb.eArgTypeAddressOrExpression, "star")],
    WordsKind.OPTIONAL_EXPRESSION: [(lldb.eArgTypeAddressOrExpression, "star")],
    WordsKind.SETTING: [(lldb.eArgTypeName, "optional"), (lldb.eArgTypeValue, "optional")],
    WordsKind.SWITCH: [(lldb.eArgTypeBoolean, "optional")],
}
SWITCH_WORDS = ("on", "off")


def available() -> bool:
    """Does this LLDB take parsed Python commands (`command script add -p`)?"""
    try:
        from lldb.plugins import parsed_cmd  # noqa: F401
    except ImportError:
        return False
    return True


def parsed(raw):
    """A parsed-command class for the raw command class `raw` (commands.BacktraceCommand, ...)."""
    from lldb.plugins.parsed_cmd import ParsedCommand

    class Parsed(_Parsed, raw, ParsedCommand):
        pass

    Parsed.__name__ = Parsed.__qualname__ = raw.__name__
    return Parsed


class _Parsed:
    """Options and arguments from the declaration; the line rebuilt for parse_lldb."""

    def __init__(self, debugger, internal_dict):
        base._Command.__init__(self, debugger, internal_dict)
        from lldb.plugins.parsed_cmd import ParsedCommand
        ParsedCommand.__init__(self, debugger, internal_dict)

    def setup_command_definition(self):
        parser = self.get_parser()
        for option in self.spec.options_for(LLDB):
            if option.kind is OptionKind.FLAG:
                parser.add_option(option.short, option.name, option.help, default=None, dest=option.name)
                parser.get_option_element(option.name).pop("value_type", None)    # LLDB 19: a flag takes no value
            else:
                parser.add_option(option.short, option.name, option.help, default=None, dest=option.name,
                                  value_type=VALUE_TYPES[option.kind])
        words = ARGUMENTS[self.spec.words_for(LLDB).kind]
        if words:
            parser.add_argument_set([parser.make_argument_element(kind, repeat) for kind, repeat in words])

    def set_option_value(self, exe_ctx, opt_name, opt_value):
        parser = self.get_parser()
        element = parser.get_option_element(opt_name)
        if element is not None and "value_type" not in element:      # a flag (LLDB 19's parser needs a type)
            element["_value_set"] = True
            return True
        return parser.set_option_value(exe_ctx, opt_name, opt_value)

    def get_long_help(self):
        # LLDB prints the syntax line and the options itself.
        return "\n" + self.spec.body(LLDB, DEFAULT_SOURCES).strip() + "\n"

    def __call__(self, debugger, args, exe_ctx, result):
        words = [args.GetItemAtIndex(i).GetStringValue(4096) for i in range(args.GetSize())] \
            if hasattr(args, "GetSize") else list(args)
        parser = self.get_parser()
        line = []
        for option in self.spec.options_for(LLDB):
            if parser.was_set(option.name):
                value = getattr(parser, option.name, None)
                line.append(option.spelled(LLDB) if option.kind is OptionKind.FLAG
                            else "%s=%s" % (option.spelled(LLDB), value))
        line += ["--"] + words
        base._Command.__call__(self, debugger, " ".join(shlex.quote(w) for w in line), exe_ctx, result)

    # -- completion (LLDB 20 and later ask for it) -----------------------------------
    def handle_option_argument_completion(self, long_option, cursor_pos):
        if long_option != "sources":
            return False
        return _complete_list(self.get_parser().dest_for_option("sources") or "", cursor_pos)

    def handle_argument_completion(self, args, arg_pos, cursor_pos):
        kind = self.spec.words_for(LLDB).kind
        typed = args[arg_pos][:cursor_pos] if arg_pos < len(args) else ""
        if kind is WordsKind.SWITCH:
            return _complete(typed, SWITCH_WORDS)
        if kind in (WordsKind.LEVEL, WordsKind.THREADS_COUNT) and arg_pos == 0 and typed and "all".startswith(typed):
            return _complete(typed, ("all",))
        if kind is not WordsKind.SETTING:
            return False
        if arg_pos == 0:
            return _complete(typed, [s.name for s in SETTINGS])
        try:
            setting = find_setting(args[0], SETTINGS)
        except ValueError:
            return True
        if setting.type is SettingType.SOURCES:
            return _complete_list(typed, len(typed))
        if setting.type is SettingType.BOOLEAN:
            return _complete(typed, SWITCH_WORDS)
        return True


def _complete(typed, choices):
    """LLDB's answer: one completion, several, or handled with none."""
    found = [c for c in choices if c.startswith(typed)]
    if len(found) == 1:
        return {"completion": found[0], "mode": "complete"}
    return {"values": found} if found else True


def _complete_list(text, cursor_pos):
    """Complete the last name of a comma-separated source list, keeping the names before it."""
    text = text[:cursor_pos]
    done, _, typed = text.rpartition(",")
    head = done + "," if done else ""
    given = set(done.split(",")) if done else set()
    found = [head + name for name in DEFAULT_SOURCES if name.startswith(typed) and name not in given]
    if len(found) == 1:
        return {"completion": found[0], "mode": "partial"}
    return {"values": found} if found else True


def _define_classes():
    """One parsed class per subcommand, named as its raw class, for `command script add -p -c`."""
    for _, name in SUBCOMMANDS:
        globals()[name] = parsed(getattr(commands, name))


if available():
    _define_classes()
