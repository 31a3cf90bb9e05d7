"""One-line install: `python -m plugin gdbinit|lldbinit` from a fresh venv of another interpreter.

The venv is made by the python3 first on PATH (pyenv's, not the /usr/bin/python3
GDB and LLDB embed, which has no pyelftools here); the plugin is pip-installed
into it, and the printed lines are then used by GDB and LLDB with only system
directories on PATH.
"""

import os
import shutil
import subprocess

import pytest

from support import ROOT, build, need_tool

SYSTEM_PATH = "/usr/bin:/bin"


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    interpreter = shutil.which("python3")
    if interpreter is None or os.path.realpath(interpreter) == os.path.realpath("/usr/bin/python3"):
        pytest.skip("needs a python3 on PATH other than the debuggers' /usr/bin/python3")
    where = tmp_path_factory.mktemp("install") / "venv"
    made = _run([interpreter, "-m", "venv", str(where)])
    assert made.returncode == 0, made.stderr
    pip = _run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT)])
    assert pip.returncode == 0, pip.stderr[-2000:]
    return where


def _line(venv, which, tmp_path):
    out = _run([str(venv / "bin" / "python"), "-m", "plugin", which], cwd=tmp_path)     # not the checkout
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_printed_lines_name_the_installed_files(venv, tmp_path):
    gdb_line = _line(venv, "gdbinit", tmp_path)
    assert gdb_line.startswith("source " + str(venv)) and gdb_line.endswith("gdb_unwinder/gdbinit.py")
    lldb_line = _line(venv, "lldbinit", tmp_path)
    assert lldb_line.startswith("command script import " + str(venv)) and lldb_line.endswith("lldb_commands")
    rc = tmp_path / "gdbinit"
    rc.write_text("set pagination off")           # no final newline: the line still goes on its own
    for expected in ("added to", "already has"):
        out = _run([str(venv / "bin" / "python"), "-m", "plugin", "gdbinit", "--append", "--file", str(rc)],
                   cwd=tmp_path)
        assert expected in out.stdout, out.stdout + out.stderr
    assert rc.read_text() == "set pagination off\n%s\n" % gdb_line


def test_gdb_and_lldb_load_the_printed_lines(venv, tmp_path):
    binary = build("chain.c", ["-O0"])
    env = dict(os.environ, PATH=SYSTEM_PATH)
    gdb = _run([need_tool("gdb"), "-q", "-batch", "-nx", "-ex", _line(venv, "gdbinit", tmp_path),
                "-ex", "break level3", "-ex", "run plain", "-ex", "unwind backtrace", str(binary)], env=env)
    assert "not loaded" not in gdb.stdout + gdb.stderr, gdb.stderr
    assert "level2" in gdb.stdout and "[found by: .eh_frame CFI]" in gdb.stdout
    lldb = _run([need_tool("lldb-16"), "--no-lldbinit", "--batch", "-o", _line(venv, "lldbinit", tmp_path),
                 "-o", "b level3", "-o", "run plain", "-o", "unwind backtrace", str(binary)], env=env)
    assert "not loaded" not in lldb.stdout + lldb.stderr, lldb.stderr
    assert "level2" in lldb.stdout and "[found by: .eh_frame CFI]" in lldb.stdout
