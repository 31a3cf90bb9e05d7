"""Load the unwind plugin into GDB: `source CHECKOUT/gdb_unwinder/gdbinit.py`.

GDB embeds the system Python, which may not be the interpreter that ran
pip. So before importing, this puts the checkout on sys.path and lets
plugin/bootstrap.py find pyelftools.
"""

import inspect
import os
import sys

try:
    import gdb
except ImportError as _exc:     # GDB's own Python modules are missing (a broken data-directory)
    gdb = None
    sys.stderr.write("unwind plugin: not loaded: GDB's Python has no gdb module (%s)\n" % _exc)

# GDB runs sourced scripts in __main__'s namespace, where __file__ may name
# whichever script sourced this one; the code object knows the real file.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(inspect.currentframe().f_code.co_filename)))


def _load():
    if _CHECKOUT not in sys.path:
        if os.path.basename(_CHECKOUT) in ("site-packages", "dist-packages"):
            # pip installed the plugin there, maybe for another Python than GDB's (whose
            # pyelftools would then not compile here): GDB's own packages go first.
            sys.path.append(_CHECKOUT)
        else:
            sys.path.insert(0, _CHECKOUT)
    if sys.version_info < (3, 9):        # the plugin's modules would not even compile
        gdb.write("unwind plugin: not loaded: GDB's Python is %s; the plugin needs Python 3.9 or later\n"
                  % sys.version.split()[0], gdb.STDERR)
        return
    from plugin.bootstrap import ensure_pyelftools, missing_message
    if not ensure_pyelftools(_CHECKOUT):
        gdb.write(missing_message("GDB") + "\n", gdb.STDERR)
        return
    try:
        from gdb_unwinder.compat import unsupported
        reason = unsupported()
        if reason:
            gdb.write("unwind plugin: not loaded: %s\n" % reason, gdb.STDERR)
            return
        import elftools.dwarf.callframe  # noqa: F401
        import gdb_unwinder
        gdb_unwinder.install()
    except SyntaxError as exc:      # a pyelftools (or plugin) for a newer Python than GDB's
        gdb.write("unwind plugin: not loaded: %s does not compile under GDB's Python %s\n"
                  % (exc.filename, sys.version.split()[0]), gdb.STDERR)
    except Exception as exc:        # a plugin that fails to load must not take GDB down
        gdb.write("unwind plugin: not loaded: %s: %s\n" % (type(exc).__name__, exc), gdb.STDERR)

if gdb is not None:
    _load()
