"""The command and setting declarations, and both option styles read from them.

GDB and LLDB read the same declaration: the checks of the positional words
(explain LEVEL|all, backtrace N, tables ADDRESS|FUNCTION) must give the same
value and the same message in both styles. The JSON shape a declaration
announces is compared with what the offline tables and modules reports
really print.
"""

import ast
import json
import subprocess
import sys

import pytest

from plugin.commands import reports
from plugin.commands.catalog import COMMANDS, EXPLAIN, MODULES, SETTINGS as SETTINGS_COMMAND, TABLES, BACKTRACE, VALIDATE, commands_for
from plugin.commands.options import parse_gdb, parse_lldb
from plugin.commands.spec import ArgumentError, Debugger, OPTIONS
from plugin.engine import DEFAULT_SOURCES
from plugin.modules import ModuleMap
from plugin.settings import (SETTINGS, UNLIMITED, SettingError, SettingType, find_setting, parse_sources,
                             settings_for)
from plugin.file_targets.elf import FileTarget
from support import ROOT, build

GDB, LLDB = Debugger.GDB, Debugger.LLDB


def test_usage_lines_spell_options_in_each_debuggers_style():
    assert BACKTRACE.usage(GDB) == "unwind backtrace [-json] [-sources LIST] [N|-N]"
    assert BACKTRACE.usage(LLDB) == "unwind backtrace [--json] [--sources LIST] [--count N] [all] [N|-N]"
    assert EXPLAIN.usage(GDB) == "unwind explain [-json] [-sources LIST] [-verbose] [LEVEL|all]"
    assert TABLES.usage(LLDB) == "unwind tables [--json] [--all] ADDRESS|FUNCTION"
    assert [c.name for c in commands_for(GDB)] == ["backtrace", "explain", "tables", "compare", "modules",
                                                   "cache", "validate"]
    assert [c.name for c in commands_for(LLDB)][-3:] == ["settings", "validate", "provider"]
    assert VALIDATE.usage(GDB) == "unwind validate [-json] [-sources LIST] [-steps N] [FUNCTION|ADDRESS]"
    assert VALIDATE.usage(LLDB) == "unwind validate [--json] [--sources LIST] [--steps N] [FUNCTION|ADDRESS]"


def test_validate_words_and_steps_in_both_styles():
    """The function is optional (a stop at an entry validates that function); -steps is a positive count."""
    for parse, line in ((parse_gdb, []), (parse_lldb, "")):
        assert (parse(VALIDATE, line, DEFAULT_SOURCES).value, parse(VALIDATE, line, DEFAULT_SOURCES).steps) == \
            (None, None)
    given = parse_gdb(VALIDATE, ["-steps", "20", "stop_here+4"], DEFAULT_SOURCES)
    assert (given.value, given.steps) == ("stop_here+4", 20)
    given = parse_lldb(VALIDATE, "-n 7 -s cfi main", DEFAULT_SOURCES)
    assert (given.value, given.steps, given.sources) == ("main", 7, ("cfi",))
    with pytest.raises(ValueError, match="expected a positive number"):
        parse_gdb(VALIDATE, ["-steps", "0", "main"], DEFAULT_SOURCES)


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda c: c.name)
def test_help_lists_each_option_once_in_the_debuggers_spelling(spec):
    for debugger in spec.debuggers:
        text = spec.help(debugger, DEFAULT_SOURCES)
        assert "{" not in spec.title(debugger, DEFAULT_SOURCES) and "{debugger}" not in text
        for option in spec.options_for(debugger):
            assert text.count("  " + option.help_name(debugger) + " ") == 1, text
        other = LLDB if debugger is GDB else GDB
        assert other.title + "'s own" not in text, text      # the other debugger's words never leak in


@pytest.mark.parametrize("words, value", [([], None), (["all"], "all"), (["0"], 0), (["0x3"], 3)])
def test_level_words_mean_the_same_in_both_styles(words, value):
    assert parse_gdb(EXPLAIN, words, DEFAULT_SOURCES).value == value
    assert parse_lldb(EXPLAIN, " ".join(words), DEFAULT_SOURCES).value == value


@pytest.mark.parametrize("words, message", [
    (["-1"], "LEVEL must be a frame number or \"all\", not '-1'"),
    (["abc"], "LEVEL must be a frame number or \"all\", not 'abc'"),
    (["1", "2"], "expected one LEVEL or \"all\", got '1 2'"),
])
def test_bad_level_is_the_same_error_in_both_styles(words, message):
    for parse, line in ((parse_gdb, words), (parse_lldb, " ".join(words))):
        with pytest.raises(ArgumentError) as caught:
            parse(EXPLAIN, line, DEFAULT_SOURCES)
        assert str(caught.value) == message


def test_gdb_style_options():
    given = parse_gdb(BACKTRACE, ["-sources", "scan,cfi", "-json", "3"], DEFAULT_SOURCES)
    assert (given.json, given.sources, given.value) == (True, ("scan", "cfi"), 3)
    assert parse_gdb(BACKTRACE, ["--", "2"], ("cfi",)).sources == ("cfi",)     # the current setting
    with pytest.raises(ValueError, match=r"^unknown option -bogus \(options: -json -sources -verbose\)$"):
        parse_gdb(EXPLAIN, ["-bogus"], DEFAULT_SOURCES)
    with pytest.raises(ValueError, match="unknown option -count"):          # an LLDB-only option
        parse_gdb(BACKTRACE, ["-count", "2"], DEFAULT_SOURCES)
    with pytest.raises(ValueError, match="^-sources needs a list, e.g. -sources cfi,frame-pointer$"):
        parse_gdb(BACKTRACE, ["-sources"], DEFAULT_SOURCES)
    assert parse_gdb(BACKTRACE, ["-5"], DEFAULT_SOURCES).value == -5      # the outermost five, as bt -5
    with pytest.raises(ArgumentError, match=r"expected a frame count N \(innermost N\) or -N .*, got '0'"):
        parse_gdb(BACKTRACE, ["0"], DEFAULT_SOURCES)
    assert parse_gdb(TABLES, ["main", "+", "4"], DEFAULT_SOURCES).value == "main + 4"


def test_lldb_style_options():
    given = parse_lldb(BACKTRACE, "-s scan,cfi --json -c3", DEFAULT_SOURCES)
    assert (given.json, given.sources, given.count) == (True, ("scan", "cfi"), 3)
    assert parse_lldb(BACKTRACE, "--count=2", DEFAULT_SOURCES).count == 2
    with pytest.raises(ValueError) as caught:
        parse_lldb(BACKTRACE, "-c 0", DEFAULT_SOURCES)
    assert str(caught.value) == ("argument -c/--count: expected a positive number, not '0' "
                                 "(options: --json/-j, --sources/-s LIST, --count/-c N)")
    assert parse_lldb(BACKTRACE, "5", DEFAULT_SOURCES).value == 5          # positional, as in GDB
    assert parse_lldb(BACKTRACE, "-3", DEFAULT_SOURCES).value == -3
    with pytest.raises(ArgumentError, match=r"expected a frame count"):
        parse_lldb(BACKTRACE, "5 6", DEFAULT_SOURCES)
    with pytest.raises(ValueError, match="unknown source 'nosuch'"):
        parse_lldb(BACKTRACE, "--sources nosuch", DEFAULT_SOURCES)
    with pytest.raises(ArgumentError, match=r"give either --all or an ADDRESS\|FUNCTION, not both"):
        parse_lldb(TABLES, "--all main", DEFAULT_SOURCES)
    with pytest.raises(ArgumentError, match=r"\(or --all\)$"):
        parse_lldb(TABLES, "", DEFAULT_SOURCES)
    assert parse_lldb(SETTINGS_COMMAND, "sources cfi, scan", DEFAULT_SOURCES).value == ["sources", "cfi,", "scan"]


def test_settings_parse_format_and_bounds():
    words = find_setting("scan-words", SETTINGS)
    assert words.parse("0x400", DEFAULT_SOURCES) == 1024 and words.format(1024) == "1024"
    with pytest.raises(SettingError) as caught:
        words.parse("-1", DEFAULT_SOURCES)
    assert str(caught.value) == "scan-words must be a whole number from 1 to 1048576, not '-1'"
    assert caught.value.problem == "must be a whole number from 1 to 1048576, not '-1'"
    frames = find_setting("max-frames", SETTINGS)
    for bad in ("abc", "-1", "0"):      # -1 is no silent "unlimited"
        with pytest.raises(ValueError, match="max-frames must be a whole number of at least 1, or unlimited, not '%s'"
                           % bad):
            frames.parse(bad, DEFAULT_SOURCES)
    assert frames.parse("unlimited", DEFAULT_SOURCES) == UNLIMITED and frames.format(UNLIMITED) == "unlimited"
    assert frames.show(UNLIMITED, DEFAULT_SOURCES) == "An unwind walk stops after unlimited frames."
    with pytest.raises(SettingError, match="scan-words must be a whole number from 1 to 1048576, not 'unlimited'"):
        words.parse("unlimited", DEFAULT_SOURCES)
    shown = find_setting("sources", SETTINGS).show(("cfi", "scan"), DEFAULT_SOURCES)
    assert shown.count("cfi") == 1
    assert shown.endswith("Off: sframe, compact, exidx, pdata, orc, analysis, frame-pointer.")
    assert find_setting("sources", SETTINGS).show(DEFAULT_SOURCES, DEFAULT_SOURCES).count("scan") == 1
    sources = find_setting("sources", SETTINGS)
    assert sources.default_value(DEFAULT_SOURCES) == DEFAULT_SOURCES
    assert sources.parse("frame-pointer, scan", DEFAULT_SOURCES) == ("frame-pointer", "scan")
    assert sources.format(("cfi", "scan")) == "cfi,scan"
    fallback = find_setting("fallback", SETTINGS)
    assert fallback.type is SettingType.BOOLEAN and fallback.show(False, DEFAULT_SOURCES).count("does not use") == 1
    assert fallback.name == "guesses" and "fallback" in fallback.aliases     # the old name still finds it
    assert [s.name for s in settings_for("lldb", DEFAULT_SOURCES)] == ["sources", "max-frames", "scan-words", "guesses"]
    assert [s.name for s in settings_for("gdb", ("cfi",))] == ["sources", "max-frames", "claim",
                                                              "trap-handler-names"]   # no fallback built
    traps = find_setting("trap-handler-names", SETTINGS)
    assert traps.default_value(DEFAULT_SOURCES) == ()
    assert traps.parse("_sigtramp, __restore_rt  _sigtramp", DEFAULT_SOURCES) == ("_sigtramp", "__restore_rt")
    assert traps.parse("", DEFAULT_SOURCES) == () and traps.format(("a", "b")) == "a,b"
    assert traps.show((), DEFAULT_SOURCES) == "Functions looked up as trap handlers: none."
    assert "lldb" not in traps.debuggers       # LLDB has its own target.trap-handler-names
    with pytest.raises(ValueError, match="^unknown setting 'stack-words'; the settings are: sources, max-frames, scan-words, guesses$"):
        find_setting("stack-words", settings_for("lldb", DEFAULT_SOURCES))
    with pytest.raises(ValueError, match="source cfi named twice"):
        parse_sources("cfi,cfi", DEFAULT_SOURCES)


def test_declared_json_shape_of_tables_matches_the_offline_output():
    binary = build("chain.c", ["-O2"])
    out = subprocess.run([sys.executable, "-m", "plugin", "tables", str(binary), OPTIONS["json"].spelled(LLDB)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert tuple(json.loads(out.stdout)) == TABLES.json_keys       # every entry: no "agreement"


def test_declared_json_shape_of_modules_matches_the_report():
    target = FileTarget(str(build("chain.c", ["-O2"])))
    data, text = reports.modules_report(ModuleMap(target))
    assert tuple(data) == MODULES.json_keys
    assert data["modules"] and "chain" in text


def test_offline_sources_option_reads_lists_as_the_debuggers_do():
    binary = build("chain.c", ["-O2"])
    out = subprocess.run([sys.executable, "-m", "plugin", "tables", str(binary), "--sources", "cfi,nosuch"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "unknown source 'nosuch'" in out.stderr


def test_lldb_loader_registers_every_declared_command():
    """loader.py names the command classes by hand: every declared LLDB command, under its own name."""
    from plugin.commands import catalog
    from lldb_commands.loader import SUBCOMMANDS
    name_of = {}
    nodes = [node for name in ("commands.py", "validate.py")        # they import lldb: read, not import
             for node in ast.parse((ROOT / "lldb_commands" / name).read_text()).body]
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and getattr(statement.targets[0], "id", None) == "spec":
                    name_of[node.name] = getattr(catalog, statement.value.attr).name
    assert sorted(name_of.values()) == sorted(c.name for c in commands_for(LLDB))
    assert sorted(SUBCOMMANDS) == sorted((name, cls) for cls, name in name_of.items())
