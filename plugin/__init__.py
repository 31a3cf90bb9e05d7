"""Debugger-independent core of the unwind plugin.

Nothing in this package imports gdb or lldb: the debugger adapters in
gdb_unwinder/ and lldb_commands/ hand it a Target and render its evidence.
"""
