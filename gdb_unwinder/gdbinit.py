"""Load the unwind plugin into GDB: `source CHECKOUT/gdb_unwinder/gdbinit.py`.

GDB embeds the system Python, which may not be the interpreter that ran
pip. So before importing, this puts the checkout on sys.path and, if
pyelftools is not importable, looks for it in the checkout's .venv and in
the site-packages of the python3 interpreters on PATH.
"""

import glob
import inspect
import os
import subprocess
import sys

import gdb

# GDB runs sourced scripts in __main__'s namespace, where __file__ may name
# whichever script sourced this one; the code object knows the real file.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename)))


def _add_path(path):
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)


def _find_pyelftools():
    version = "python%d.%d" % sys.version_info[:2]
    for pattern in (os.path.join(_CHECKOUT, ".venv", "lib", version, "site-packages"),
                    os.path.join(_CHECKOUT, ".venv", "lib", "python3*", "site-packages")):
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


def _load():
    if _CHECKOUT not in sys.path:
        sys.path.insert(0, _CHECKOUT)
    try:
        import elftools  # noqa: F401
    except ImportError:
        _add_path(_find_pyelftools())
        try:
            import elftools  # noqa: F401,F811
        except ImportError:
            gdb.write("unwind plugin: not loaded: pyelftools is missing for GDB's Python %s; "
                      "run: /usr/bin/python3 -m pip install pyelftools (or the README's set-up command)\n"
                      % sys.version.split()[0], gdb.STDERR)
            return
    try:
        import gdb_unwinder
        gdb_unwinder.install()
    except Exception as exc:        # a plugin that fails to load must not take GDB down
        gdb.write("unwind plugin: not loaded: %s: %s\n" % (type(exc).__name__, exc), gdb.STDERR)


_load()
