"""Which GDB the tests drive: the system's 13.1, or 10.1 / 16.3 unpacked beside it.

GDB 10.1 (Debian 11) and 16.3 (Debian 13) are unpacked by tests/setup.sh into
$UNWIND_GDB_ROOT/N (default /opt/unwind-gdb/N), each with a wrapper
N/bin/gdb (and N/bin/gdb-multiarch) that runs it on its own libraries and
Python. use(version) selects the one that need_tool("gdb") and
need_tool("gdb-multiarch") return (tests/gdb/conftest.py does it for every
test); the system's GDB until then.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

import pytest

FULL_VERSION = 13           # the system's GDB (Debian 12)
VERSIONS = (10, 13, 16)
GDB_ROOT = os.environ.get("UNWIND_GDB_ROOT", "/opt/unwind-gdb")
PROGRAMS = ("gdb", "gdb-multiarch")

_selected = [FULL_VERSION]


def find_gdb(version, program="gdb"):
    """Path of `program` (gdb or gdb-multiarch) of GDB `version` on this machine, or None."""
    if version == FULL_VERSION:
        return shutil.which(program)
    path = os.path.join(GDB_ROOT, str(version), "bin", program)
    return path if os.access(path, os.X_OK) else None


def use(version):
    """Make need_tool("gdb") and need_tool("gdb-multiarch") return GDB `version`."""
    _selected[0] = version


def version():
    """The GDB version the tests drive now."""
    return _selected[0]


def program(name="gdb"):
    """The selected version's `name`; the test fails (never skips) when it is not installed."""
    path = find_gdb(version(), name)
    if path is None:
        pytest.fail("GDB %d's %s is not installed: run tests/setup.sh (the README's set-up command)"
                    % (version(), name))
    return path


@functools.lru_cache(maxsize=None)
def exact_version(path):
    """(major, minor) that `path --version` reports."""
    out = subprocess.run([path, "-nx", "--version"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"GNU gdb .*?(\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def require(major, what):
    """Skip the test on a GDB older than `major`, naming what it lacks (`what`)."""
    if version() < major:
        pytest.skip("GDB %d lacks %s (GDB %d+)" % (version(), what, major))
