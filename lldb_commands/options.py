"""LLDB-style options for the `unwind` commands: --json/-j, --sources/-s LIST, -c N.

Parsed with argparse (short and long forms, `--opt=value`, `-c5`, `--`
before positional words that look like options), but every problem is a
UsageError with a one-line message instead of argparse's exit, so the
command can turn it into an LLDB error.
"""

import argparse
import shlex

from plugin.engine import parse_sources

# name -> (short, long, metavar, help); the order is the order usage lines list them.
OPTIONS = {
    "json": ("-j", "--json", None, "print JSON instead of text"),
    "sources": ("-s", "--sources", "LIST", "comma-separated unwind sources, in order"),
    "count": ("-c", "--count", "N", "stop after N frames"),
    "all": ("-a", "--all", None, "every entry of every module instead of one address"),
}


class UsageError(ValueError):
    """Bad arguments: the message is shown to the user as one LLDB error line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError("%s (options: %s)" % (message, describe(self.allowed)))


def describe(names):
    parts = []
    for name in names:
        short, long_, metavar, _ = OPTIONS[name]
        parts.append("%s/%s%s" % (long_, short, " " + metavar if metavar else ""))
    return ", ".join(parts) or "none"


def usage(command, names, positional=""):
    """`unwind NAME [--json] ... POSITIONAL`, for help texts."""
    parts = ["unwind", command]
    for name in names:
        _, long_, metavar, _ = OPTIONS[name]
        parts.append("[%s%s]" % (long_, " " + metavar if metavar else ""))
    if positional:
        parts.append(positional)
    return " ".join(parts)


def option_help(names):
    """One indented line per option, for help texts."""
    return "\n".join("  %-22s %s" % ("%s, %s%s" % (OPTIONS[n][0], OPTIONS[n][1],
                                                   " " + OPTIONS[n][2] if OPTIONS[n][2] else ""), OPTIONS[n][3])
                     for n in names)


def _positive(text):
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive number, not %r" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("expected a positive number, not %r" % text)
    return value


def _sources(text):
    try:
        return parse_sources(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse(command, names, default_sources):
    """Parse `command` (the text after the command name); returns a Namespace with .words."""
    try:
        argv = shlex.split(command or "")
    except ValueError as exc:
        raise UsageError("cannot split the arguments: %s" % exc) from None
    parser = _Parser(prog="unwind", add_help=False, allow_abbrev=False)
    parser.allowed = names
    for name in names:
        short, long_, metavar, _ = OPTIONS[name]
        if name in ("json", "all"):
            parser.add_argument(short, long_, dest=name, action="store_true")
        elif name == "sources":
            parser.add_argument(short, long_, dest=name, type=_sources, default=default_sources,
                                metavar=metavar)
        elif name == "count":
            parser.add_argument(short, long_, dest=name, type=_positive, default=None, metavar=metavar)
    parser.add_argument("words", nargs="*")
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit:          # argparse may still exit on its own; never let it reach LLDB
        raise UsageError("bad arguments %r (options: %s)" % (command, describe(names))) from None
    for name in ("json", "all", "sources", "count"):
        if not hasattr(args, name):
            setattr(args, name, {"sources": default_sources}.get(name))
    return args
