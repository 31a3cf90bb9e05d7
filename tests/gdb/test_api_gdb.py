"""plugin.api inside GDB returns the very objects the commands' -json prints."""

import subprocess

from api_probe import check, script
from support import ROOT, build, need_tool

PRELUDE = '''import gdb
def command(line):
    return json.loads(gdb.execute(line, to_string=True))
'''
NAMES = ("walk", "walk2", "explain", "tables", "compare")


def test_api_matches_the_json_commands(tmp_path):
    probe = tmp_path / "api.py"
    probe.write_text(script(PRELUDE, {"json": "-json", "sources": "-sources", "count": ""}, NAMES))
    binary = build("chain.c", ["-O0"])
    proc = subprocess.run([need_tool("gdb"), "-q", "-batch", "-nx", "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT,
                           "-ex", "break level3", "-ex", "run plain", "-ex", "source %s" % probe, str(binary)],
                          capture_output=True, text=True, timeout=300)
    out = check(proc.stdout + proc.stderr, NAMES)
    assert out["explain"][0]["version"] == 1
    assert out["explain"][0]["frames"][0]["evidence"]["rule"]["cfa"]["register"] in ("rsp", "rbp")
