"""Make the core importable inside LLDB, then register the `unwind` commands.

LLDB embeds the system Python, which may not be the interpreter that ran
pip. So, as gdb_unwinder/gdbinit.py does for GDB, this puts the checkout on
sys.path and, if pyelftools is not importable, looks for it in the
checkout's .venv and in the site-packages of the python3 interpreters on
PATH. If it is still missing the plugin says so in one line and registers
nothing: half a plugin would fail later with a less useful message.
"""

import glob
import os
import subprocess
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (subcommand, class in lldb_commands.commands), in the order `help unwind` lists them.
SUBCOMMANDS = (("backtrace", "BacktraceCommand"), ("explain", "ExplainCommand"),
               ("tables", "TablesCommand"), ("compare", "CompareCommand"),
               ("modules", "ModulesCommand"))

SHORT_HELP = "Recover the stack from unwind tables and explain every frame."
# LLDB 16 shows a container's --long-help as its "Syntax:" line, so that is what it holds.
SYNTAX = "unwind <subcommand> [<options>]   (subcommands: %s; try: help unwind backtrace)" % (
    ", ".join(name for name, _ in SUBCOMMANDS))


def _add_path(path):
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)


def _find_pyelftools():
    version = "python%d.%d" % sys.version_info[:2]
    for pattern in (os.path.join(CHECKOUT, ".venv", "lib", version, "site-packages"),
                    os.path.join(CHECKOUT, ".venv", "lib", "python3*", "site-packages")):
        for path in sorted(glob.glob(pattern)):
            if os.path.isdir(os.path.join(path, "elftools")):
                return path
    for interpreter in ("python3", "python"):
        try:
            out = subprocess.run([interpreter, "-c", "import elftools, os; "
                                  "print(os.path.dirname(os.path.dirname(elftools.__file__)))"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        path = out.stdout.strip()
        if out.returncode == 0 and os.path.isdir(os.path.join(path, "elftools")):
            return path
    return None


def _have_pyelftools():
    try:
        import elftools  # noqa: F401
        return True
    except ImportError:
        pass
    _add_path(_find_pyelftools())
    try:
        import elftools  # noqa: F401,F811
        return True
    except ImportError:
        return False


def _say(message):
    # Inside LLDB, sys.stderr is the debugger's error stream while a script runs.
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def load(debugger):
    """Register the commands in `debugger`; never raises (a broken plugin must not break LLDB)."""
    if CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
    if not _have_pyelftools():
        _say("unwind plugin: not loaded: pyelftools is missing for LLDB's Python %s; "
             "run: /usr/bin/python3 -m pip install pyelftools (or the README's set-up command)"
             % sys.version.split()[0])
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
    interpreter = debugger.GetCommandInterpreter()
    # -o replaces what an earlier import registered, so re-importing reloads cleanly.
    # LLDB's own quoting: the help texts must not contain double quotes.
    lines = ['command container add -o -h "%s" -H "%s" unwind' % (SHORT_HELP, SYNTAX)]
    lines += ["command script add -o -c %s.commands.%s unwind %s" % (__package__, cls, name)
              for name, cls in SUBCOMMANDS]
    for line in lines:
        result = lldb.SBCommandReturnObject()
        interpreter.HandleCommand(line, result)
        if not result.Succeeded():
            raise RuntimeError("%s: %s" % (line, (result.GetError() or "failed").strip()))
