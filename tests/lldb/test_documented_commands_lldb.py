"""What docs/commands.md and docs/json.md say LLDB's commands do is what they do.

The LLDB section of docs/commands.md spells each command with LLDB's option
style; every command and option it names (and `unwind validate`'s LLDB line)
is run in LLDB, each option on its own, and none fails. Every top-level JSON
field docs/json.md documents for a command is in LLDB's `--json` output of it.
Both lists are parsed from the docs (as the GDB twin of this test does), so the
docs and this test cannot drift apart.
"""
from __future__ import annotations

import re
from typing import Dict, List

from documented import documented_json, run_documented
from lldbrun import run_lldb
from support import ROOT, build

COMMANDS_MD = ROOT / "docs" / "commands.md"
START = "The same commands, with LLDB's option style"
END = "Same meaning and the same JSON"

# What an option's placeholder becomes when run; what each command is given.
VALUES = {"--sources": "--sources cfi,frame-pointer", "--steps": "--steps 200"}
TARGETS = {"tables": "level2", "explain": "1", "backtrace": "2"}
ALONE = {"--all"}       # an option that takes the place of the command's target


def documented_lldb_commands() -> Dict[str, List[str]]:
    """{command: [long option...]} from the LLDB paragraph of docs/commands.md and its validate line."""
    text = COMMANDS_MD.read_text()
    start = text.index(START)
    paragraph = text[start:text.index(END, start)]
    commands: Dict[str, List[str]] = {}
    for match in re.finditer(r"`unwind (\w+)([^`]*)`", paragraph, re.S):
        commands.setdefault(match.group(1), []).extend(re.findall(r"\[(--[a-z]+)", match.group(2)))
    validate = re.search(r"^unwind validate (.*)# LLDB", text, re.M)
    commands["validate"] = re.findall(r"\[(--[a-z]+)", validate.group(1))
    return {name: sorted(set(options)) for name, options in commands.items()}


def test_the_lldb_docs_parse():
    commands = documented_lldb_commands()
    assert set(commands) == {"backtrace", "explain", "tables", "compare", "modules", "cache", "validate"}, commands
    assert {"--json", "--sources"} <= set(commands["backtrace"]) and "--all" in commands["tables"], commands
    assert "--steps" in commands["validate"] and "--verbose" in commands["explain"], commands


def _line(name: str, option: str) -> str:
    words = ["unwind", name]
    if option:
        words.append(VALUES.get(option, option))
    if name in TARGETS and option not in ALONE:
        words.append(TARGETS[name])
    return " ".join(words)


def test_documented_commands_and_json_fields_hold_in_lldb():
    commands = documented_lldb_commands()
    fields = documented_json()
    results = run_documented(run_lldb, build("chain.c", ["-O2"]), commands, _line, "--json")
    failed = {key: value for key, value in results.items()
              if isinstance(value, dict) and (value.get("ok") is False or set(value) == {"error"})}
    assert not failed, failed
    missing = {name: sorted(set(keys) - set(results["%s json" % name]))
               for name, keys in fields.items() if name in commands}
    assert not any(missing.values()), "fields docs/json.md documents but LLDB does not print: %s" % missing
