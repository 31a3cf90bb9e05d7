"""GDB's commands and parameters are what plugin/commands/catalog.py and plugin/settings.py declare.

Each command's -json output has the keys its declaration announces, its help
shows the declared usage line, and each `show unwind NAME` says the declared
default; a value out of the declared bounds is refused and changes nothing.
"""

from gdbrun import run_gdb
from plugin.commands.catalog import commands_for
from plugin.commands.spec import Debugger
from plugin.engine import DEFAULT_SOURCES
from plugin.settings import SettingType, settings_for
from support import build

GDB = Debugger.GDB
LINES = {"tables": "unwind tables -json level2"}     # with an address: "agreement" too


def test_commands_and_parameters_follow_their_declarations():
    specs = commands_for(GDB)
    settings = settings_for("gdb", DEFAULT_SOURCES)
    actions = [(spec.name, "json", LINES.get(spec.name, "unwind %s -json" % spec.name)) for spec in specs]
    actions += [("help " + spec.name, "cmd", "help unwind " + spec.name) for spec in specs]
    actions += [("show " + s.name, "cmd", "show unwind " + s.name) for s in settings]
    bounded = [s for s in settings if s.type == SettingType.UNSIGNED]
    actions += [("too small " + s.name, "cmd", "set unwind %s %d" % (s.name, s.minimum - 1)) for s in bounded]
    actions += [("after " + s.name, "cmd", "show unwind " + s.name) for s in bounded]
    results, _ = run_gdb(build("chain.c", ["-O2"]), actions, args=["plain"])
    for spec in specs:
        keys = tuple(results[spec.name])
        assert keys[:len(spec.json_keys)] == spec.json_keys, (spec.name, keys)
        assert set(keys) - set(spec.json_keys) <= set(spec.json_sometimes), (spec.name, keys)
        help_text = results["help " + spec.name]
        assert help_text.startswith(spec.title(GDB, DEFAULT_SOURCES)), help_text
        assert "Usage: " + spec.usage(GDB) in help_text, help_text
    for setting in settings:
        default = setting.default_value(DEFAULT_SOURCES)
        assert results["show " + setting.name].strip() == setting.show(default, DEFAULT_SOURCES)
    for setting in bounded:
        error = results["too small " + setting.name]["error"]
        assert error.endswith("unwind %s: must be a whole number %s, not '%d'" % (
            setting.name, setting.bounds(), setting.minimum - 1)), error
        assert results["after " + setting.name] == results["show " + setting.name]
