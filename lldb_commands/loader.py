"""Make the core importable inside LLDB, then register the `unwind` commands.

LLDB embeds the system Python, which may not be the interpreter that ran
pip. So, as gdb_unwinder/gdbinit.py does for GDB, this puts the checkout on
sys.path and lets plugin/bootstrap.py find pyelftools. If it is still
missing the plugin says so in one line and registers nothing: half a plugin
would fail later with a less useful message.
"""

import os
import sys

from .subcommands import SUBCOMMANDS

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHORT_HELP = "Recover the stack from unwind tables and explain every frame."
# LLDB 16 shows a container's --long-help as its "Syntax:" line, so that is what it holds.
SYNTAX = "unwind <subcommand> [<options>]   (subcommands: %s; try: help unwind backtrace)" % (
    ", ".join(name for name, _ in SUBCOMMANDS))


def _say(message):
    # Inside LLDB, sys.stderr is the debugger's error stream while a script runs.
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def load(debugger):
    """Register the commands in `debugger`; never raises (a broken plugin must not break LLDB)."""
    if CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
    from plugin.bootstrap import ensure_pyelftools, missing_message
    if not ensure_pyelftools(CHECKOUT):
        _say(missing_message("LLDB"))
        return False
    try:
        _register(debugger)
    except Exception as exc:
        _say("unwind plugin: not loaded: %s: %s" % (type(exc).__name__, exc))
        return False
    return True


def _register(debugger):
    import lldb
    from . import commands  # noqa: F401  (fail here, not at first use, if the core is broken)
    try:        # so `process launch -C lldb_commands.scripted_process.SnapshotProcess` resolves
        from . import scripted_process  # noqa: F401
    except ImportError:     # an LLDB without lldb.plugins.scripted_process: commands still work
        pass
    interpreter = debugger.GetCommandInterpreter()
    # -o replaces what an earlier import registered, so re-importing reloads cleanly.
    # LLDB's own quoting: the help texts must not contain double quotes.
    lines = ['command container add -o -h "%s" -H "%s" unwind' % (SHORT_HELP, SYNTAX)]
    # LLDB 18 and later take parsed commands (real syntax lines, completion); 16 raw ones.
    from . import parsed
    kind = "-p -c %s.parsed" % __package__ if parsed.available() else "-c %s.commands" % __package__
    lines += ["command script add -o %s.%s unwind %s" % (kind, cls, name) for name, cls in SUBCOMMANDS]
    for line in lines:
        result = lldb.SBCommandReturnObject()
        interpreter.HandleCommand(line, result)
        if not result.Succeeded():
            raise RuntimeError("%s: %s" % (line, (result.GetError() or "failed").strip()))
    from . import provider      # LLDB 22: its own bt gets the frames the plugin proves
    provider.install(debugger)
