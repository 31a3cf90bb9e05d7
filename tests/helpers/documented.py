"""What docs/json.md documents: the top-level JSON fields of each command's JSON output."""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Tuple

from support import ROOT

JSON_MD = ROOT / "docs" / "json.md"


def top_level_keys(text: str) -> List[str]:
    """The "keys" at brace depth 1 of the first JSON-like object in text (values after a colon are skipped)."""
    keys, depth, started = [], 0, False
    for match in re.finditer(r'[{}]|"([A-Za-z_]+)"\s*(?=[:,}`])|:\s*"[^"]*"', text):
        token = match.group(0)
        if token == "{":
            depth += 1
            started = True
        elif token == "}":
            depth -= 1
            if started and depth == 0:
                break
        elif match.group(1) and depth == 1:
            keys.append(match.group(1))
    return keys


def documented_json() -> Dict[str, List[str]]:
    """{command: [top-level key...]} for each "`unwind NAME -json`" paragraph of docs/json.md."""
    text = JSON_MD.read_text()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^`unwind (\w+) -json`", text, re.M)]
    found = {}
    for index, (start, name) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(text)
        heading = text.find("\n## ", start, end)
        found[name] = top_level_keys(text[start:end if heading < 0 else heading])
    return found


def run_documented(run: Callable, binary, commands: Dict[str, List[str]], line: Callable,
                   json_option: str) -> dict:
    """Run each documented command bare, with each of its options on its own, and with its JSON option,
    in the debugger `run` drives (run_gdb or run_lldb); the results by "NAME OPTION" and "NAME json".
    validate steps one real call and leaves the program after it: one session each."""
    actions: List[Tuple[str, str, str]] = []
    for name, options in commands.items():
        for option in [""] + [o for o in options if o != json_option]:
            actions.append(("%s %s" % (name, option), "cmd", line(name, option)))
        actions.append(("%s json" % name, "json", line(name, json_option)))
    stepped = [action for action in actions if action[2].startswith("unwind validate")]
    results, _ = run(binary, [action for action in actions if action not in stepped], args=["plain"])
    for action in stepped:
        results.update(run(binary, [action], args=["plain"])[0])
    return results
