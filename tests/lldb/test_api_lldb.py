"""plugin.api inside LLDB returns the very objects the commands' --json prints."""

import subprocess

from api_probe import check, script
from support import ROOT, build, need_tool

PRELUDE = '''import lldb
def command(line):
    result = lldb.SBCommandReturnObject()
    lldb.debugger.GetCommandInterpreter().HandleCommand(line, result)
    return json.loads(result.GetOutput())
'''
NAMES = ("walk", "walk2", "explain", "compare")


def test_api_matches_the_json_commands(tmp_path):
    probe = tmp_path / "api.py"
    probe.write_text(script(PRELUDE, {"json": "--json", "sources": "--sources", "count": "-c "}, NAMES))
    binary = build("chain.c", ["-O0"])
    proc = subprocess.run([need_tool("lldb-16"), "--no-lldbinit", "--batch",
                           "-o", "command script import %s/lldb_commands" % ROOT, "-o", "b level3",
                           "-o", "run plain", "-o", "script exec(open(%r).read())" % str(probe), str(binary)],
                          capture_output=True, text=True, timeout=300)
    check(proc.stdout + proc.stderr, NAMES)
