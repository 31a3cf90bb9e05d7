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


def test_api_errors_are_unwind_errors_without_a_process(tmp_path):
    """No process, a symbol GDB cannot evaluate: UnwindError with the command's line, no gdb.GdbError."""
    probe = tmp_path / "noprocess.py"
    probe.write_text("import plugin.api as u\n"
                     "for call in ('u.walk()', 'u.explain()', 'u.compare()', \"u.tables('nosuch')\"):\n"
                     "    try:\n"
                     "        eval(call)\n"
                     "        print('@@@ returned', call)\n"
                     "    except u.UnwindError as exc:\n"
                     "        print('@@@ UnwindError', call, exc)\n")
    proc = subprocess.run([need_tool("gdb"), "-q", "-batch", "-nx", "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT,
                           "-ex", "source %s" % probe], capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.startswith("@@@")]
    assert len(lines) == 4 and all(line.startswith("@@@ UnwindError") for line in lines), out
    assert "the program is not being run" in lines[0]
    assert "Traceback" not in out and "GdbError" not in out, out


def test_the_api_loads_the_plugin_itself():
    """A script that imports plugin.api before the plugin is loaded: the API loads it through GDB
    (the core imports no adapter), and the walk agrees with GDB's own frames."""
    binary = build("chain.c", ["-O0"])
    proc = subprocess.run([need_tool("gdb"), "-q", "-batch", "-nx",
                           "-ex", "python import sys; sys.path.insert(0, %r)" % str(ROOT),
                           "-ex", "python import plugin.api as u", "-ex", "break level3", "-ex", "run plain",
                           "-ex", "python print('@@@', [f['function'] for f in u.walk(3)['frames']])",
                           "-ex", "python print('@@@', 'unwind' in gdb.execute('help unwind', to_string=True))",
                           str(binary)], capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@@@")]
    assert lines == ["@@@ ['level3', 'level2', 'level1']", "@@@ True"], proc.stdout + proc.stderr
