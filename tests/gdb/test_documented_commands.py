"""What docs/commands.md and docs/json.md say GDB's commands do is what they do.

Every command and option the GDB command table of docs/commands.md names is
run in GDB (each option on its own); none fails. Every top-level JSON field
docs/json.md documents for a GDB command's `-json` output is present in real
output. Both lists are parsed from the docs, so the docs and this test
cannot drift apart.
"""
from __future__ import annotations

import re
from typing import Dict, List, Set

from documented import documented_json, run_documented
from gdbrun import run_gdb
from support import ROOT, build

COMMANDS_MD = ROOT / "docs" / "commands.md"

# What an option's or argument's placeholder becomes when run.
VALUES = {"-sources": "-sources cfi,frame-pointer", "-steps": "-steps 200"}
TARGETS = {"tables": "level2", "explain": "1", "backtrace": "2"}


def documented_gdb_commands() -> Dict[str, List[str]]:
    """{command: [option...]} from the first table of docs/commands.md (GDB's)."""
    commands: Dict[str, List[str]] = {}
    for line in COMMANDS_MD.read_text().splitlines():
        match = re.match(r"^\| `unwind (\w+)([^`]*)` \|", line)
        if match:
            name = match.group(1)
            if name in commands:        # the GDB table comes first; later tables repeat it
                continue
            commands[name] = re.findall(r"\[(-[a-z]+)", match.group(2))
    return commands


def test_the_docs_parse():
    commands = documented_gdb_commands()
    assert set(commands) >= {"backtrace", "explain", "tables", "compare", "modules", "validate"}, commands
    assert "-json" in commands["backtrace"] and "-sources" in commands["backtrace"]
    fields = documented_json()
    assert fields["backtrace"][:2] == ["version", "frames"], fields
    assert "frames" in fields["explain"] and "modules" in fields["modules"], fields


def _line(name: str, option: str) -> str:
    words = ["unwind", name]
    if option:
        words.append(VALUES.get(option, option))
    if name in TARGETS:
        words.append(TARGETS[name])
    return " ".join(words)


def test_documented_commands_and_json_fields_hold_in_gdb():
    commands = documented_gdb_commands()
    fields = documented_json()
    results = run_documented(run_gdb, build("chain.c", ["-O2"]), commands, _line, "-json")
    failed = {key: value for key, value in results.items()
              if isinstance(value, dict) and set(value) == {"error"}}
    assert not failed, failed
    missing: Dict[str, Set[str]] = {}
    for name, keys in fields.items():
        if name not in commands:
            continue
        got = results["%s json" % name]
        absent = set(keys) - set(got)
        if absent:
            missing[name] = absent
    assert not missing, "fields docs/json.md documents but GDB does not print: %s" % missing
