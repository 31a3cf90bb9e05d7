"""`help set unwind sources` names every source and what it reads (issue 32 item 7).

GDB completes no value of a Python string parameter (gdb.Parameter has no completer
hook in GDB 10, 13 or 16), so `set unwind sources <TAB>` cannot offer the names; the
help lists them instead, from plugin/settings.py's Source records. If a GDB ever
completes them, the second assertion fails and the help can say so
(docs/settings.md, "Why sources is a parameter").
"""

import pathlib
import subprocess

from plugin.engine import DEFAULT_SOURCES
from plugin.settings import SOURCE_BY_NAME
from support import need_tool

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gdb_says(*commands):
    argv = [need_tool("gdb"), "-q", "-batch", "-nx", "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT]
    for command in commands:
        argv += ["-ex", "echo <<%s>>\\n" % command, "-ex", command]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    return {command: out.split("<<%s>>\n" % command, 1)[1].split("<<", 1)[0] for command in commands}


def test_help_set_unwind_sources_lists_every_source():
    said = gdb_says("help set unwind sources", "complete set unwind sources c")
    lines = [line.split(None, 1) for line in said["help set unwind sources"].splitlines()
             if line.startswith("  ")]
    assert [(name, words) for name, words in lines] == \
        [(name, SOURCE_BY_NAME[name].description) for name in DEFAULT_SOURCES]
    assert said["complete set unwind sources c"].strip() == "", "GDB now completes parameter values"
