"""The script both debuggers run to compare plugin.api with the `--json` commands, and its checks.

script(prelude, spell) is Python for the debugger's interpreter: `prelude`
defines command(line) -> parsed JSON for that debugger; spell(option) spells
an option its way ("-json" in GDB, "--json" in LLDB). The script prints one
line "@@@" + JSON: for each probe [what plugin.api returned, what the command
printed], and the api's error for a level that does not exist.
"""
from __future__ import annotations

import json

PROBES = {          # name -> (api call, command line with {json}/{sources}/{count} options)
    "walk": ("u.walk()", "unwind backtrace {json}"),
    "walk2": ("u.walk(limit=2, sources=['cfi'])", "unwind backtrace {json} {sources} cfi {count}2"),
    "explain": ("u.explain(1)", "unwind explain {json} 1"),
    "tables": ("u.tables('main')", "unwind tables {json} main"),
    "compare": ("u.compare()", "unwind compare {json}"),
}


# Bad arguments: each raises UnwindError with the command's message, naming no command-line option.
BAD_CALLS = {"sources": "u.walk(sources=['nosuch'])", "count": "u.walk(0)", "level": "u.explain('x')",
             "symbol": "u.tables('no_such_symbol_anywhere')"}


def script(prelude: str, spell: dict, names) -> str:
    lines = ["import json", "import plugin.api as u", prelude,
             "def same(obj):", "    return json.loads(json.dumps(obj))", "out = {}"]
    for name in names:
        call, line = PROBES[name]
        lines.append("out[%r] = [same(%s), command(%r)]" % (name, call, line.format(**spell)))
    lines += ["try:", "    u.explain(99)", "except u.UnwindError as exc:", "    out['error'] = str(exc)",
              "out['errors'] = {}",
              "for name, call in %r.items():" % BAD_CALLS,
              "    try:", "        eval(call)", "        out['errors'][name] = None",
              "    except u.UnwindError as exc:", "        out['errors'][name] = str(exc)",
              "    except Exception as exc:", "        out['errors'][name] = 'not UnwindError: %s' % type(exc).__name__",
              "out['outermost2'] = [f['function'] for f in u.walk(-2)['frames']]",
              "print('@@@' + json.dumps(out))"]
    return "\n".join(lines) + "\n"


def check(stdout: str, names) -> dict:
    """The probes' results from a debugger's output, each asserted equal to its command's JSON."""
    line = [x for x in stdout.splitlines() if x.startswith("@@@")]
    assert line, stdout[-2000:]
    out = json.loads(line[0][3:])
    for name in names:
        ours, theirs = out[name]
        assert ours == theirs, name
    assert out["walk"][0]["version"] == 1
    assert [f["function"] for f in out["walk"][0]["frames"]][:4] == ["level3", "level2", "level1", "main"]
    assert out["walk2"][0]["stop_reason"] == "limit" and len(out["walk2"][0]["frames"]) == 2
    assert out["error"].startswith("no frame at level 99")
    for name, message in out["errors"].items():
        assert message is not None and not message.startswith("not UnwindError"), (name, message)
        assert "options:" not in message and "-sources" not in message and "-c " not in message, (name, message)
    assert out["errors"]["sources"].startswith("unknown source 'nosuch'; choose from: cfi")
    assert out["outermost2"] == [f["function"] for f in out["walk"][0]["frames"]][-2:]
    return out
