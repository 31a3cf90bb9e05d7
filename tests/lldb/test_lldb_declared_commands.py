"""LLDB's commands are what plugin/commands/catalog.py and plugin/settings.py declare.

Each command's --json output has the keys its declaration announces (for
`unwind settings`, one per setting LLDB offers, with its declared default),
and its help shows the declared summary and usage line.
"""

from lldbrun import run_lldb, version
from plugin.commands.catalog import commands_for
from plugin.commands.spec import Debugger
from plugin.engine import DEFAULT_SOURCES
from plugin.settings import settings_for
from support import build

LLDB = Debugger.LLDB
LINES = {"tables": "unwind tables --json level2"}
PARSED_VERSION = 19         # LLDB 18 and later take parsed Python commands (lldb_commands/parsed.py)


def test_commands_follow_their_declarations():
    specs = commands_for(LLDB)
    actions = [(spec.name, "json", LINES.get(spec.name, "unwind %s --json" % spec.name)) for spec in specs]
    actions += [("help " + spec.name, "cmd", "help unwind " + spec.name) for spec in specs]
    results, _ = run_lldb(build("chain.c", ["-O2"]), actions, args=["plain"])
    for spec in specs:
        keys, always = tuple(results[spec.name]), spec.json_shape(LLDB, DEFAULT_SOURCES)
        assert keys[:len(always)] == always, (spec.name, keys)
        assert set(keys) - set(always) <= set(spec.json_sometimes), (spec.name, keys)
        help_text = results["help " + spec.name]["output"]
        assert help_text.startswith(spec.title(LLDB, DEFAULT_SOURCES)), help_text
        if version() >= PARSED_VERSION:     # parsed commands: LLDB writes the syntax and options
            assert "Syntax: %s <cmd-options>" % spec.name in help_text and "Expects 'raw' input" not in help_text, help_text
            for option in spec.options_for(LLDB):
                assert "-%s" % option.short in help_text and "--%s" % option.name in help_text, help_text
        else:
            assert "Usage: " + spec.usage(LLDB) in help_text, help_text
    for setting in settings_for("lldb", DEFAULT_SOURCES):
        value = setting.default_value(DEFAULT_SOURCES)
        assert results["settings"][setting.key] == (list(value) if isinstance(value, tuple) else value)
