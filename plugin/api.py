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
plugin there first if it is not loaded yet (through the debugger, as a user
would: `source .../gdbinit.py`, `command script import .../lldb_commands`).
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Union

from plugin.commands import catalog
from plugin.commands.spec import OPTIONS, CommandSpec, Debugger
from plugin.settings import parse_sources

# (command, option words, operand words) -> the object its JSON option prints; raises ValueError
# with the command's one-line message. Each adapter registers its own when it loads
# (gdb_unwinder.install, lldb_commands/commands.py): the core never imports the adapters.
Runner = Callable[[CommandSpec, List[str], List[str]], dict]
_RUNNERS: Dict[Debugger, Runner] = {}
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def register_runner(debugger: Debugger, runner: Runner) -> None:
    """Called by an adapter when it loads: how this API runs a command in its debugger."""
    _RUNNERS[debugger] = runner


def _run(spec, words, sources):
    debugger = _debugger()
    runner = _RUNNERS.get(debugger) or _load(debugger)
    try:
        return runner(spec, _options(sources, debugger), words)
    except ValueError as exc:       # the adapter turns the debugger's own errors into ValueError
        raise UnwindError(str(exc)) from None


def _debugger() -> Debugger:
    try:
        import gdb  # noqa: F401
    except ImportError:
        return Debugger.LLDB
    return Debugger.GDB


def _load(debugger: Debugger) -> Runner:
    """Load the plugin into the debugger as a user would (its loader registers the runner):
    the core does not import the adapters (docs/design.md, Layers)."""
    if debugger == Debugger.GDB:
        import gdb
        gdb.execute("source %s" % os.path.join(CHECKOUT, "gdb_unwinder", "gdbinit.py"), to_string=True)
    else:
        import lldb
        lldb.debugger.HandleCommand("command script import %s" % os.path.join(CHECKOUT, "lldb_commands"))
    runner = _RUNNERS.get(debugger)
    if runner is None:
        raise UnwindError("the unwind plugin could not be loaded in %s" % debugger.value.upper())
    return runner
