"""An interactive GDB session under pexpect, as a person would type it."""

import os

import pexpect

from gdbrun import TRANSCRIPTS
from support import ROOT, build, need_tool

PROMPT = r"\(gdb\) "

# What a person types after `run plain` stops at level3, and what each answer must contain.
SESSION = [
    ("bt", ("level2", "level1", "main")),
    ("unwind explain 1", ("#1 level2 in ", "recovered from frame #0 (level3", "by .eh_frame CFI",
                          "row in force from 0x", "CFA = rsp+", "    rip = 0x",
                          "verdict: the debugger's own unwinder agrees")),
    ("help unwind", tuple("unwind " + sub for sub in ("backtrace", "explain", "tables", "compare", "modules"))),
    ("unwind explain -bogus", ("unknown option -bogus",)),
    ("unwind backtrace -sources nosuch", ("unknown source 'nosuch'",)),
    ("unwind explain 99", ("no frame at level 99",)),
    ("unwind tables no_such_symbol_here", ("cannot evaluate",)),
    ("unwind tables -1", ("-1 is not an address (it is negative)",)),
    ("set unwind sources bogus", ("unknown source",)),
    ("show unwind sources", ("cfi",)),
    ("set unwind max-frames abc", ("unwind max-frames: must be a whole number of at least 1, or unlimited, not 'abc'",)),
    ("set unwind max-frames -1", ("not '-1'",)),
    ("set unwind max-frames unlimited", ()),
    ("show unwind max-frames", ("An unwind walk stops after unlimited frames.",)),
    ("set unwind max-frames 20000", ()),
]
# Then, after TAB completion: the plugin's unwinder disabled, the program run to its end and again.
AFTER_COMPLETION = [
    ("disable unwinder global unwind-plugin", ("1 unwinder disabled",)),
    ("continue", ("exited normally",)),
    ("bt", ("No stack",)),
    ("unwind backtrace", ("unwind: the program is not being run",)),
    ("run plain", ("Breakpoint 1, level3",)),           # again, with the caches dropped at exit
    ("enable unwinder global unwind-plugin", ()),
    ("unwind backtrace", ("found by: .eh_frame CFI", "Backtrace stopped: outermost")),
]


def test_interactive_session():
    gdb = need_tool("gdb")
    binary = build("chain.c", ["-O2"])
    env = dict(os.environ, TERM="dumb")       # no colours or bracketed paste in the transcript
    child = pexpect.spawn(gdb, ["-nx", "-q", "-iex", "set style enabled off", str(binary)],
                          encoding="utf-8", timeout=60, dimensions=(50, 200), env=env)
    log = []

    def send(line, expect=PROMPT):
        child.sendline(line)
        child.expect(expect)
        log.append(line + "\n" + child.before)
        return child.before

    def answer_all(steps):
        for command, expected in steps:
            out = send(command)
            for text in expected:
                assert text in out, (command, text, out)

    try:
        child.expect(PROMPT)
        send("set pagination off")
        send("source %s/gdb_unwinder/gdbinit.py" % ROOT)
        send("break level3")
        out = send("run plain")
        assert "Breakpoint 1, level3" in out
        answer_all(SESSION)
        child.sendline("unwind bac\t")            # completion of the subcommand
        child.expect(PROMPT)
        log.append(child.before)
        answer_all(AFTER_COMPLETION)
        send("set confirm off")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        transcript = "".join(log)
        TRANSCRIPTS.append(transcript)
        child.close(force=True)
    assert "Traceback" not in transcript, transcript
