"""plugin.api inside LLDB returns the very objects the commands' --json prints."""

import json
import subprocess

from support import ROOT, build, need_tool

SCRIPT = r'''
import json, lldb
import plugin.api as u

def command(line):
    result = lldb.SBCommandReturnObject()
    lldb.debugger.GetCommandInterpreter().HandleCommand(line, result)
    return json.loads(result.GetOutput())

def same(obj):
    return json.loads(json.dumps(obj))

out = {
    "walk": [same(u.walk()), command("unwind backtrace --json")],
    "walk2": [same(u.walk(limit=2, sources=["cfi"])), command("unwind backtrace --json --sources cfi -c 2")],
    "explain": [same(u.explain(1)), command("unwind explain --json 1")],
    "compare": [same(u.compare()), command("unwind compare --json")],
}
try:
    u.explain(99)
except u.UnwindError as exc:
    out["error"] = str(exc)
print("@@@" + json.dumps(out))
'''


def test_api_matches_the_json_commands(tmp_path):
    script = tmp_path / "api.py"
    script.write_text(SCRIPT)
    binary = build("chain.c", ["-O0"])
    proc = subprocess.run([need_tool("lldb-16"), "--no-lldbinit", "--batch",
                           "-o", "command script import %s/lldb_commands" % ROOT, "-o", "b level3",
                           "-o", "run plain", "-o", "script exec(open(%r).read())" % str(script), str(binary)],
                          capture_output=True, text=True, timeout=300)
    line = [x for x in proc.stdout.splitlines() if x.startswith("@@@")]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(line[0][3:])
    for name in ("walk", "walk2", "explain", "compare"):
        ours, theirs = out[name]
        assert ours == theirs, name
    assert out["walk"][0]["version"] == 1
    assert [f["function"] for f in out["walk"][0]["frames"]][:4] == ["level3", "level2", "level1", "main"]
    assert out["walk2"][0]["stop_reason"] == "limit" and len(out["walk2"][0]["frames"]) == 2
    assert out["error"].startswith("no frame at level 99")
