"""The plugin's Python API, for scripts running inside GDB or LLDB.

    import plugin.api as unwind
    bt = unwind.walk()                       # what `unwind backtrace -json` prints
    frame = unwind.explain(2)["frames"][0]   # `unwind explain -json 2`
    rows = unwind.tables("main")             # `unwind tables -json main`
    verdict = unwind.compare()["agree"]      # `unwind compare -json`

Each function returns the very object the command's `-json` (GDB) or
`--json` (LLDB) option prints: dicts, lists, ints and strings, with the
fields README.md's "JSON" section documents and a "version" field where
the command has one. Arguments are read by the same declarations as the
commands' (plugin/commands/catalog.py), so the checks and defaults are the
same: sources default to the `unwind sources` setting, levels are the
debugger's (as its `bt` numbers frames). Bad input or a debuggee that is not stopped raises
UnwindError with the one-line message the command would print.

It works in the debugger whose Python runs it (GDB's `python` command or
a sourced script; LLDB's `script` or an imported module), and loads the
plugin there first if it is not loaded yet.
"""
from __future__ import annotations

import shlex
from typing import Optional, Sequence, Union

from plugin.commands import catalog
from plugin.commands.options import parse_gdb, parse_lldb
from plugin.commands.spec import OPTIONS, Debugger
from plugin.settings import parse_sources


class UnwindError(ValueError):
    """A command's one-line error: bad arguments, no process, nothing at that address."""


def walk(limit: Optional[int] = None, sources: Optional[Sequence[str]] = None) -> dict:
    """The plugin's backtrace from the selected frame: {"version", "frames", "stop_reason", ...}."""
    return _run(catalog.BACKTRACE, [] if limit is None else [str(limit)], sources)


def explain(level: Union[int, str, None] = None, sources: Optional[Sequence[str]] = None) -> dict:
    """How frame `level` (default: the selected frame; "all": every frame) was recovered."""
    return _run(catalog.EXPLAIN, [] if level is None else [str(level)], sources)


def tables(where: Union[int, str]) -> dict:
    """Every table entry covering an address (int) or the address of an expression such as "main"."""
    return _run(catalog.TABLES, ["0x%x" % where if isinstance(where, int) else str(where)], None)


def compare(sources: Optional[Sequence[str]] = None) -> dict:
    """The plugin's frames beside the debugger's own: {"frames", "agree", "summary", "stop_reason"}."""
    return _run(catalog.COMPARE, [], sources)


def _options(sources, debugger):
    """The JSON option (a command may build only the form it prints), and the sources asked for,
    checked here so an error names no command-line option."""
    asked = [OPTIONS["json"].spelled(debugger)]
    if sources is None:
        return asked
    if isinstance(sources, str):
        raise UnwindError("sources is a list of names, e.g. [\"cfi\", \"frame-pointer\"]")
    try:
        parse_sources(",".join(sources))
    except ValueError as exc:
        raise UnwindError(str(exc)) from None
    return asked + [OPTIONS["sources"].spelled(debugger), ",".join(sources)]


def _run(spec, words, sources):
    try:
        import gdb  # noqa: F401
    except ImportError:
        return _run_lldb(spec, words, sources)
    return _run_gdb(spec, words, sources)


def _run_gdb(spec, words, sources):
    import gdb
    import gdb_unwinder
    from gdb_unwinder.commands import RUN
    state = gdb_unwinder.install()          # the running plugin's state (installs it once)
    try:
        given = parse_gdb(spec, _options(sources, Debugger.GDB) + ["--"] + words, state.sources)
        return RUN[spec.name](state, given)[0]
    except (ValueError, gdb.error, gdb.GdbError) as exc:    # gdb.GdbError is no gdb.error: both are caught
        raise UnwindError(str(exc)) from None


def _run_lldb(spec, words, sources):
    import lldb
    from lldb_commands import commands
    debugger = lldb.debugger
    command = next(c for c in vars(commands).values()
                   if isinstance(c, type) and getattr(c, "spec", None) is spec)(debugger, None)
    line = " ".join(shlex.quote(w) for w in _options(sources, Debugger.LLDB) + ["--"] + words)
    try:
        given = parse_lldb(spec, line, command.state.sources)
        return command.run(given, lldb.SBExecutionContext(debugger.GetSelectedTarget()))[0]
    except ValueError as exc:
        raise UnwindError(str(exc)) from None
