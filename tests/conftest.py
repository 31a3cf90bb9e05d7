"""Test-suite set-up: import paths, and one marker per test folder.

tests/helpers/ holds the modules tests share (support, gdbrun, lldbrun, ...)
and the scripts run inside the debuggers (gdb_driver.py, lldb_driver.py).
It is put on sys.path so tests import helpers by bare name
(`from support import build`); pytest collects nothing there (no test_*.py).

Each test folder is a marker, applied here from the folder a test lives in
and declared in pyproject.toml, so `pytest -m gdb` selects the GDB tests.
"""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent))
sys.path.insert(0, str(TESTS / "helpers"))

# folder under tests/ -> marker (the same names as the folders)
FOLDER_MARKERS = ("unit", "oracle", "emulated", "gdb", "lldb", "realworld", "bench", "pythons")

collect_ignore = ["helpers"]


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            folder = Path(str(item.fspath)).resolve().relative_to(TESTS).parts[0]
        except ValueError:
            continue
        if folder in FOLDER_MARKERS:
            item.add_marker(getattr(pytest.mark, folder))
