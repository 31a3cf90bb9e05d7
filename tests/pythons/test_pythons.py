"""Every Python the plugin supports, 3.9 to 3.13: the unit and oracle tests under each.

pyproject.toml says `requires-python = ">=3.9"`; GDB 10 embeds 3.9, Ubuntu 22.04's
GDB 12 3.10, Debian 12's GDB and LLDB 3.11, Ubuntu 24.04's GDB 3.12, Debian 13's
GDB 3.13. tests/setup_pythons.sh makes a virtual environment per interpreter under
.venv-pythons/X.Y with the project and its test extras installed by pip; each test
here runs tests/unit and tests/oracle in one of them (3.11 is the main .venv, which
runs the whole suite). In CI a missing environment fails its test.

A cheaper guard runs first, under every interpreter at once: each product module
that annotates anything postpones annotations (`from __future__ import
annotations`), so `int | None` and `list[int]` in signatures are never evaluated
on 3.9, and every file compiles under each interpreter.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from support import ROOT, every

VERSIONS = ("3.9", "3.10", "3.12", "3.13")
# The unit and oracle run takes about two minutes per interpreter: by default the oldest
# and the newest run it (3.11 is the main suite's); every one with UNWIND_PYTHONS_EVERY=1
# (or UNWIND_EVERYTHING=1). Every interpreter compiles every product file either way.
SUBSET = ("3.9", "3.13")
PACKAGES = ("plugin", "gdb_unwinder", "lldb_commands")


def _python(version):
    python = ROOT / ".venv-pythons" / version / "bin" / "python"
    if not python.exists():
        message = "no virtual environment for Python %s at %s: run tests/setup_pythons.sh" % (version, python)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def _product_files():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def _annotates(tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            if node.returns is not None or any(a.annotation is not None for a in every):
                return True
    return False


def test_every_annotated_product_module_postpones_its_annotations():
    missing = []
    for path in _product_files():
        tree = ast.parse(path.read_text(), str(path))
        postponed = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                        and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
        if _annotates(tree) and not postponed:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, "annotations evaluated at import on Python 3.9: %s" % missing


@pytest.mark.parametrize("version", VERSIONS)
def test_every_product_file_compiles(version):
    files = [str(path) for path in _product_files()]
    script = ("import sys\nfor path in sys.argv[1:]:\n"
              "    compile(open(path).read(), path, 'exec')\n")
    proc = subprocess.run([str(_python(version)), "-c", script, *files], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("version", VERSIONS if every("UNWIND_PYTHONS_EVERY") else SUBSET)
def test_unit_and_oracle_tests_pass(version):
    python = _python(version)
    proc = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == version
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/unit", "tests/oracle"],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=1800)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    closing = proc.stdout.strip().splitlines()[-1]
    assert " passed" in closing and "failed" not in closing and "error" not in closing, tail
    if os.environ.get("CI"):
        assert "skipped" not in closing, tail
