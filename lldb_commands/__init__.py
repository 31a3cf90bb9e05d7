"""LLDB side of the unwind plugin: `command script import CHECKOUT/lldb_commands`.

LLDB calls __lldb_init_module once per import; it finds pyelftools for
LLDB's embedded Python and registers the `unwind ...` commands (see
loader.py). Nothing here imports the core before pyelftools is on the path.
"""


def __lldb_init_module(debugger, internal_dict):
    from . import loader
    loader.load(debugger)
