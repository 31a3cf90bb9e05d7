"""An interactive GDB session under pexpect, as a person would type it."""

import os

import pexpect

from gdbrun import TRANSCRIPTS
from support import ROOT, build, need_tool

PROMPT = r"\(gdb\) "


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

    try:
        child.expect(PROMPT)
        send("set pagination off")
        send("source %s/gdb_unwinder/gdbinit.py" % ROOT)
        send("break level3")
        out = send("run plain")
        assert "Breakpoint 1, level3" in out
        out = send("bt")
        assert "level2" in out and "level1" in out and "main" in out
        out = send("unwind explain 1")
        assert "#1 level2 in " in out and "recovered from frame #0 (level3" in out and "by .eh_frame CFI" in out
        assert "row in force from 0x" in out and "CFA = rsp+" in out and "    rip = 0x" in out
        assert "verdict: the debugger's own unwinder agrees" in out
        out = send("help unwind")
        for sub in ("backtrace", "explain", "tables", "compare", "modules"):
            assert "unwind " + sub in out
        out = send("unwind explain -bogus")
        assert "unknown option -bogus" in out
        out = send("unwind backtrace -sources nosuch")
        assert "unknown source 'nosuch'" in out
        out = send("unwind explain 99")
        assert "no frame at level 99" in out
        out = send("unwind tables no_such_symbol_here")
        assert "cannot evaluate" in out
        out = send("set unwind sources bogus")
        assert "unknown source" in out
        out = send("show unwind sources")
        assert "cfi" in out
        child.sendline("unwind bac\t")            # completion of the subcommand
        child.expect(PROMPT)
        log.append(child.before)
        out = send("disable unwinder global unwind-plugin")
        assert "1 unwinder disabled" in out
        out = send("continue")
        assert "exited normally" in out
        out = send("bt")
        assert "No stack" in out
        out = send("unwind backtrace")
        assert "unwind: the program is not being run" in out
        out = send("run plain")                   # again, with the caches dropped at exit
        assert "Breakpoint 1, level3" in out
        out = send("enable unwinder global unwind-plugin")
        out = send("unwind backtrace")
        assert "found by: .eh_frame CFI" in out and "Backtrace stopped: outermost" in out
        send("set confirm off")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        transcript = "".join(log)
        TRANSCRIPTS.append(transcript)
        child.close(force=True)
    assert "Traceback" not in transcript, transcript
