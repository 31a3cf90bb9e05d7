"""Find pyelftools for a debugger's embedded Python.

GDB and LLDB embed the system Python, which may not be the interpreter
that ran pip. Both loaders put the checkout (or the site-packages pip installed the
plugin into) on sys.path, then call ensure_pyelftools(): it looks beside
the plugin, in the checkout's .venv, then in the
site-packages of the python3 interpreters on PATH. Only the standard
library is used here, since this runs before anything else can be imported.
"""

import glob
import os
import subprocess
import sys


def _find(checkout):
    if os.path.isdir(os.path.join(checkout, "elftools")):
        return checkout         # installed by pip: pyelftools sits beside the plugin in site-packages
    version = "python%d.%d" % sys.version_info[:2]
    for pattern in (os.path.join(checkout, ".venv", "lib", version, "site-packages"),
                    os.path.join(checkout, ".venv", "lib", "python3*", "site-packages")):
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


def ensure_pyelftools(checkout):
    """True when `import elftools` works, after adding the first place it is found."""
    try:
        import elftools  # noqa: F401
        return True
    except ImportError:
        pass
    path = _find(checkout)
    if path and path not in sys.path:
        sys.path.append(path)      # appended: never shadow the debugger's own packages
    try:
        import elftools  # noqa: F401,F811
        return True
    except ImportError:
        return False


def missing_message(debugger_name):
    """One line: what is missing, and the two installs that work on Debian 12 (PEP 668 refuses a bare pip)."""
    python = "python%d.%d" % sys.version_info[:2]       # the debugger's own interpreter, by name
    return ("unwind plugin: not loaded: pyelftools is missing for %s's Python %s; install it with "
            "`sudo apt-get install python3-pyelftools` (Debian, Ubuntu) or "
            "`%s -m pip install pyelftools --user --break-system-packages`"
            % (debugger_name, sys.version.split()[0], python))
