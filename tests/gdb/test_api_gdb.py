"""plugin.api inside GDB returns the very objects the commands' -json prints."""

import json
import subprocess

from support import ROOT, build, need_tool

SCRIPT = r'''
import json, gdb
import plugin.api as u

def command(line):
    return json.loads(gdb.execute(line, to_string=True))

def same(obj):
    return json.loads(json.dumps(obj))

out = {
    "walk": [same(u.walk()), command("unwind backtrace -json")],
    "walk2": [same(u.walk(limit=2, sources=["cfi"])), command("unwind backtrace -json -sources cfi 2")],
    "explain": [same(u.explain(1)), command("unwind explain -json 1")],
    "tables": [same(u.tables("main")), command("unwind tables -json main")],
    "compare": [same(u.compare()), command("unwind compare -json")],
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
    proc = subprocess.run([need_tool("gdb"), "-q", "-batch", "-nx", "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT,
                           "-ex", "break level3", "-ex", "run plain", "-ex", "source %s" % script, str(binary)],
                          capture_output=True, text=True, timeout=300)
    line = [x for x in proc.stdout.splitlines() if x.startswith("@@@")]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(line[0][3:])
    for name in ("walk", "walk2", "explain", "tables", "compare"):
        ours, theirs = out[name]
        assert ours == theirs, name
    assert out["walk"][0]["version"] == 1 and out["explain"][0]["version"] == 1
    assert [f["function"] for f in out["walk"][0]["frames"]][:4] == ["level3", "level2", "level1", "main"]
    assert out["walk2"][0]["stop_reason"] == "limit" and len(out["walk2"][0]["frames"]) == 2
    assert out["explain"][0]["frames"][0]["evidence"]["rule"]["cfa"]["register"] in ("rsp", "rbp")
    assert out["error"].startswith("no frame at level 99")
