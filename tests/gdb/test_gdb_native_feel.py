"""GDB as a person types it, in a pty: styles, TAB completion, settings, help."""

import os
import re

import pexpect

import gdbversions
from support import ROOT, build, need_tool

PROMPT = r"\(gdb\) "


def _session(binary):
    env = dict(os.environ, TERM="xterm")
    child = pexpect.spawn(need_tool("gdb"), ["-nx", "-q", str(binary)], encoding="utf-8", timeout=60,
                          dimensions=(50, 200), env=env)
    child.expect(PROMPT)
    return child


def _sender(child):
    """send(line): type one line, wait for the prompt, return what GDB printed."""
    def send(line):
        child.sendline(line)
        child.expect(PROMPT)
        return child.before
    return send


def _table(output):
    """The lines a command printed, colour escapes removed (GDB's echo and bracketed-paste codes dropped)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.replace("\r", "").split("\n")[1:]]
    return [re.sub(r"\x1b\[\?2004[hl]", "", line) for line in lines if line.strip(" \x1b[?2004hl")]


def _levels(output):
    """The frame levels (#N at a line's start) in a command's output."""
    return [int(n) for n in re.findall(r"^#(\d+)", "\n".join(_table("\n" + output)), re.M)]


def test_styles_completion_settings_and_help():
    binary = build("chain.c", ["-O0"])
    child = _session(binary)
    send = _sender(child)
    try:
        send("set pagination off")
        send("set style enabled on")
        send("source %s/gdb_unwinder/gdbinit.py" % ROOT)
        send("break level3")
        assert "Breakpoint 1, " in send("run plain")
        styled = send("unwind backtrace 2")
        assert "\x1b[34m0x" in styled and "level2" in styled          # GDB's function/address/file styles
        assert "\x1b[33mlevel3\x1b[m" in styled                   # function names in GDB's default yellow
        assert "\x1b[33mlevel3\x1b[m" in send("unwind explain 1")
        styled_compare, styled_tables = send("unwind compare"), send("unwind tables level3")
        assert "\x1b[33mlevel3\x1b[m" in styled_compare and "\x1b[34m0x" in styled_compare
        assert "\x1b[32m%s\x1b[m" % binary.name in styled_tables and "\x1b[34m0x" in styled_tables
        send("set style enabled off")
        plain = send("unwind backtrace 2")
        assert "\x1b[3" not in plain and "level3" in plain     # no colour (bracketed-paste codes remain)
        assert "\x1b[3" not in send("unwind explain 1")
        plain_compare, plain_tables = send("unwind compare"), send("unwind tables level3")
        assert "\x1b[3" not in plain_compare and "\x1b[3" not in plain_tables
        # Styled text is the plain text with colours added: the columns stay where they were.
        assert _table(styled_compare) == _table(plain_compare) and _table(styled_tables) == _table(plain_tables)
        rows = _table(plain_compare)
        assert rows[0].startswith("level ") and rows[-1] == "all %d frames agree" % (len(rows) - 2)
        assert len({row.index("agree") for row in rows[1:-1]} | {rows[0].index("verdict")}) == 1
        assert "level3" in rows[1] and "%s: .eh_frame CFI at 0x" % binary.name in _table(plain_tables)[0]

        listed = send("complete unwind explain -")
        assert "unwind explain -json" in listed and "unwind explain -verbose" in listed
        assert "-all" not in listed
        listed = send("complete unwind backtrace -sources cfi,fr")
        assert "unwind backtrace -sources cfi,frame-pointer" in listed
        # GDB 16.3 as unpacked here inserts spaces on a TAB, for its own commands too (`info fra`),
        # whatever readline it loads; `complete` (above) works there.
        if gdbversions.version() != 16:
            child.send("unwind backtrace -j\t")      # a real TAB: the option completes in place
            child.expect("-json")
            child.sendcontrol("u")
            child.sendline("")
            child.expect(PROMPT)

        shown = send("show unwind")
        for name in ("sources:", "max-frames:", "scan-words:", "guesses:"):
            assert name in shown
        assert "unwind max-frames: unlimited" in send("set unwind max-frames unlimited")
        assert "unlimited" in send("show unwind max-frames")
        assert "named twice" in send("unwind backtrace -sources cfi,cfi")
        outer = send("unwind backtrace -2")
        assert "_start" in outer and "level3" not in outer
        assert "-verbose" in send("help unwind explain")
        found = send("apropos unwind")
        assert "set unwind max-frames" in found and "unwind explain" in found
        send("set confirm off")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_static_tables_without_a_process():
    """`unwind tables FUNCTION` before `run` reads the program's file, and agrees with the offline command."""
    import json
    import subprocess
    import sys
    binary = build("chain.c", ["-O2"])
    gdb = subprocess.run([need_tool("gdb"), "-q", "-batch", "-nx", "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT,
                          "-ex", "unwind tables -json level3", str(binary)], capture_output=True, text=True, timeout=120)
    ours = json.loads(gdb.stdout)
    entry = ours["sources"][0]["entries"][0]
    offline = subprocess.run([sys.executable, "-m", "plugin", "tables", str(binary), "--json",
                              "--address", str(entry["start"])], capture_output=True, text=True, cwd=ROOT)
    assert ours["problems"] == [] and ours["sources"] == json.loads(offline.stdout)["sources"]
    # readelf, an oracle this project did not write, has the same FDE range
    frames = subprocess.run(["readelf", "--debug-dump=frames", str(binary)], capture_output=True, text=True).stdout
    assert "pc=%016x..%016x" % (entry["start"], entry["end"]) in frames


PAGER = r"--Type <RET> for more, q to quit, c to continue without paging--"


def test_long_listings_page_like_gdb_own():
    """`set height 10`: a long listing stops at GDB's pager prompt, goes on at RET, ends at `q`
    with GDB's "Quit" (no Python traceback), and `c` prints the rest down to the stop line."""
    binary = build("chain.c", ["-O0"])
    child = _session(binary)
    send = _sender(child)
    try:
        send("source %s/gdb_unwinder/gdbinit.py" % ROOT)
        send("set style enabled off")
        send("break stop_here")
        assert "Breakpoint 1, " in send("run recurse 30")
        send("set height 10")
        send("set pagination on")
        gdb_levels = re.findall(r"^#(\d+)", "\n".join(_table(send("with height 0 -- bt"))), re.M)
        assert len(gdb_levels) > 30

        child.sendline("unwind backtrace")
        child.expect(PAGER)
        first = _levels(child.before)
        assert first[0] == 0 and len(first) < 10
        child.sendline("")                  # RET: the next page, from the next level on
        child.expect(PAGER)
        second = _levels(child.before)
        assert second[0] == first[-1] + 1 and second == list(range(second[0], second[0] + len(second)))
        child.sendline("q")
        child.expect(PROMPT)
        assert "Quit" in child.before and "Traceback" not in child.before and "Python" not in child.before

        child.sendline("unwind explain all")
        child.expect(PAGER)
        assert "#0 " in child.before
        child.sendline("q")
        child.expect(PROMPT)
        assert "Quit" in child.before and "Traceback" not in child.before and "Python" not in child.before

        child.sendline("unwind backtrace")
        child.expect(PAGER)
        child.sendline("c")                 # continue without paging: every level, then the stop line
        child.expect(PROMPT)
        rest = _table(child.before)
        levels = _levels(child.before)
        assert levels == list(range(levels[0], levels[-1] + 1)) and levels[-1] >= int(gdb_levels[-1])
        assert any(line.startswith("#%s " % gdb_levels[-1]) and " main " in line for line in rest)  # GDB's last
        assert any(line.startswith("Backtrace stopped: ") for line in rest)
        assert "still here" in send("echo still here\\n")
        send("set confirm off")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
