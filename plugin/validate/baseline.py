"""`validate --baseline FILE`: keep only the disagreements an earlier `--json` run did not have.

Modules are matched by name, so one baseline of several files serves each of
them. A disagreement is known when the earlier run had one in the same module,
function and source, at the same address, with the same items and the same
table rules (a row that changes is new).
"""
from __future__ import annotations

import json
from typing import Set, Tuple


def _key(module: str, d: dict) -> Tuple:
    items = tuple(sorted((i.get("item"), i.get("table")) for i in d.get("items", ())))
    return (module, d.get("function"), d.get("source"), d.get("address"), items)


def load(path: str) -> Set[Tuple]:
    """The known disagreements of an earlier `validate --json` output (of one FILE, or of several:
    {"files": [...]}); ValueError when it is not one."""
    try:
        with open(path) as handle:
            earlier = json.load(handle)
        documents = [f["report"] for f in earlier["files"] if f["report"]] if "files" in earlier else [earlier]
        return {_key(m["module"], d) for doc in documents for m in doc["modules"] for d in m["disagreements"]}
    except OSError as exc:
        raise ValueError("cannot read baseline %s: %s" % (path, exc.strerror or exc))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError("baseline %s is not the output of validate --json" % path)


def is_known(module: str, disagreement: dict, known: Set[Tuple]) -> bool:
    """Is this disagreement (as --json writes it) one the earlier run had?"""
    return _key(module, disagreement) in known


def keep_new(report, known: Set[Tuple]) -> int:
    """Drop the report's known disagreements; the number dropped."""
    name = report.module
    before = len(report.disagreements)
    report.disagreements[:] = [d for d in report.disagreements if _key(name, d.to_json()) not in known]
    return before - len(report.disagreements)
