"""Run GDB twice on the same stop, without and with the plugin, and compare what it prints.

Helper for tests/gdb/test_transcripts.py (not collected: no test_ prefix).
"""

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from support import ROOT, need_tool

DRIVER = Path(__file__).resolve().parent / "transcript_driver.py"

# What legitimately differs between two runs of one program: process and thread ids,
# the words glibc mangles with its per-process random pointer guard, and
# uninitialised stack buffers (they hold leftovers such as the random stack canary).
NOISE = [
    (re.compile(r'= "(?:[^"\\\n]|\\.){0,4000}?\\[0-7]{3}(?:[^"\\\n]|\\.){40,}"'), '= "BYTES"'),
    (re.compile(r"jmp_buf = \{[-0-9, ]+\}"), "jmp_buf = {MANGLED}"),
    (re.compile(r"process \d+"), "process N"),
    (re.compile(r"LWP \d+"), "LWP N"),
    (re.compile(r"Thread 0x[0-9a-f]+"), "Thread 0xT"),
    (re.compile(r"^\[(New|Thread|Inferior).*\n", re.M), ""),
    (re.compile(r"^Download failed.*\n", re.M), ""),
]


def normalise(text):
    for pattern, replacement in NOISE:
        text = pattern.sub(replacement, text)
    return text


def transcript(program, args=(), breakpoint="stop_here", plugin=True, setup=(), ignore=0,
               frames=64, extra=(), finish=True, timeout=600):
    """The normalised transcript of one GDB session (see transcript_driver.py)."""
    gdb = need_tool("gdb")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "transcript.txt")
        plan = {"checkout": str(ROOT), "plugin": plugin, "setup": list(setup), "program": str(program),
                "args": [str(a) for a in args], "breakpoint": breakpoint, "ignore": ignore,
                "frames": frames, "extra": list(extra), "finish": finish, "out": out}
        env = dict(os.environ, UNWIND_TRANSCRIPT_PLAN=json.dumps(plan))
        proc = subprocess.run([gdb, "-nx", "-q", "-batch", "-x", str(DRIVER)], env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        assert os.path.exists(out), "GDB wrote no transcript:\n" + (proc.stdout + proc.stderr)[-3000:]
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        with open(out) as handle:
            return normalise(handle.read())


def first_difference(a, b):
    """A short report of where two transcripts first differ, or None when equal."""
    if a == b:
        return None
    left, right = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(left, right)):
        if x != y:
            context = "\n".join(left[max(0, i - 6):i])
            return "line %d differs:\n%s\n- %s\n+ %s" % (i + 1, context, x, y)
    return "lengths differ: %d vs %d lines; tail:\n%s" % (
        len(left), len(right), "\n".join((left if len(left) > len(right) else right)[min(len(left), len(right)):][:10]))
