"""The one line that loads the plugin into GDB or LLDB: `python -m plugin gdbinit|lldbinit [--append]`.

The line names this installation's own files (a checkout or site-packages),
so it works whichever interpreter ran pip: the debuggers' loaders put that
folder on their embedded Python's path and find pyelftools beside it.
"""
from __future__ import annotations

import os
from typing import Optional

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RC_FILES = {"gdbinit": "~/.gdbinit", "lldbinit": "~/.lldbinit"}


def init_line(debugger: str) -> str:
    """`source .../gdb_unwinder/gdbinit.py` or `command script import .../lldb_commands`."""
    if debugger == "gdbinit":
        return "source %s" % os.path.join(PACKAGE_ROOT, "gdb_unwinder", "gdbinit.py")
    if debugger == "lldbinit":
        return "command script import %s" % os.path.join(PACKAGE_ROOT, "lldb_commands")
    raise ValueError("unknown debugger init file %r (gdbinit or lldbinit)" % debugger)


def append_line(debugger: str, rc_file: Optional[str] = None) -> str:
    """Add init_line to the debugger's init file unless it is there already; says what it did."""
    line = init_line(debugger)
    path = os.path.expanduser(rc_file or RC_FILES[debugger])
    existing = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            existing = handle.read()
    if line in existing.splitlines():
        return "%s already has: %s" % (path, line)
    with open(path, "a", encoding="utf-8") as handle:
        if existing and not existing.endswith("\n"):
            handle.write("\n")
        handle.write(line + "\n")
    return "added to %s: %s" % (path, line)
