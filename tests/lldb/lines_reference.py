"""The forms `unwind backtrace` printed before lldb_commands/json_lines.py and text_lines.py,
for tests/lldb/test_lldb_lines.py (run inside LLDB by its "py" actions through runpy)."""
from __future__ import annotations

import lldb

from lldb_commands import commands, text_lines
from lldb_commands.base import dump_json
from plugin.commands.options import parse_lldb
from plugin.render import explain


def _run(debugger, thread, options):
    command = commands.BacktraceCommand(debugger, None)
    given = parse_lldb(command.spec, options, command.state.sources)
    return command.run(given, lldb.SBExecutionContext(thread))


def json_reference(debugger, thread, options: str) -> str:
    """dump_json of the per-frame dicts (explain.backtrace_json): what plugin.api returns."""
    return dump_json(_run(debugger, thread, options)[0])


def text_reference(debugger, thread, options: str) -> str:
    """The text explain.backtrace_text renders for the same walk."""
    shortened = text_lines.backtrace_text
    text_lines.backtrace_text = explain.backtrace_text
    try:
        return _run(debugger, thread, options)[1]
    finally:
        text_lines.backtrace_text = shortened
