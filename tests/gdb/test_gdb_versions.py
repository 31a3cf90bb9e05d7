"""The plugin in each GDB version (10.1, 13.1, 16.3; tests/gdb/conftest.py): it loads
without a word, uses the newer API where GDB has it, and says in one line why it cannot
load where it cannot."""

import os
import subprocess

from support import ROOT, need_tool

import gdbversions


def _gdb(*commands, env=None, options=()):
    argv = [need_tool("gdb"), "-nx", "-q", "-batch", *options, "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT]
    for command in commands:
        argv += ["-ex", command]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    return proc.stdout, proc.stderr


def test_loads_silently_and_uses_the_frame_id_gdb_offers():
    out, err = _gdb("info unwinder", "python import gdb.unwinder; from gdb_unwinder import compat; "
                    "print('frame id:', compat.FrameId is getattr(gdb.unwinder, 'FrameId', None))")
    assert err == "" or "Shared library architecture" in err, err      # GDB 10's own warnings only
    assert "unwind-plugin" in out
    assert ("frame id: True" if gdbversions.version() >= 14 else "frame id: False") in out, out


def test_too_old_a_gdb_is_one_line():
    out, err = _gdb("python from gdb_unwinder import compat; gdb.VERSION = '9.2'; print(compat.unsupported())")
    assert "GDB 9.2 is too old; the plugin needs GDB 10.1 or later" in out, out + err


def test_a_pyelftools_that_does_not_compile_is_one_line(tmp_path):
    package = tmp_path / "elftools" / "dwarf"
    package.mkdir(parents=True)
    (tmp_path / "elftools" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "callframe.py").write_text("match opcode:\n    case 1 2: pass\n")     # no Python compiles it
    out, err = _gdb(env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    lines = [line for line in err.splitlines() if "unwind plugin" in line]
    assert len(lines) == 1 and "callframe.py does not compile under GDB's Python" in lines[0], err
    assert "Traceback" not in out + err


def test_a_gdb_without_its_python_modules_is_one_line(tmp_path):
    # GDB's data-directory gone (as gdb.base/warning.exp makes it): GDB warns, the plugin says one line
    # and GDB goes on.
    out, err = _gdb("echo still here\\n", options=("-data-directory", str(tmp_path / "none")))
    lines = [line for line in err.splitlines() if "unwind plugin" in line]
    assert lines == ["unwind plugin: not loaded: GDB's Python has no gdb module (No module named 'gdb')"], err
    assert "still here" in out
    assert "Traceback" not in out + err and err.count("No module named 'gdb'") == 2, err
