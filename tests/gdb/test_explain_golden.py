"""Golden text of `unwind explain` in GDB: the demo and chain fixtures, addresses normalised.

Reviewed by eye once; a change to the wording shows up here as a diff. Only
the blocks computed from the test program's own tables are compared whole
(libc's rows change with the distribution); every frame's header is compared.
Regenerate with UNWIND_GOLDEN_UPDATE=1 and review the diff.
"""

import os
import re
import subprocess

import pytest

from gdb_actions import SIGNAL
from support import ROOT, build, need_tool

GOLDEN = ROOT / "tests" / "gdb" / "golden"
CASES = {
    # name: (source, flags, breakpoint, program arguments, gdb commands before run)
    "demo": ("../../examples/demo.c", ["-O2", "-fomit-frame-pointer"], "report", [],
             SIGNAL),
    "chain-O0": ("chain.c", ["-O0"], "level3", ["plain"], []),
    "chain-O2": ("chain.c", ["-O2"], "level3", ["plain"], []),
}


def normalise(text, binary):
    text = text.replace(binary.name, "PROGRAM")
    return re.sub(r"0x[0-9a-f]+", "0x?", text)


def own_blocks(text):
    """Headers of every frame; whole blocks of those explained from PROGRAM's tables (or the innermost)."""
    kept = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("#"):
            kept.append(block)          # the stop line
        elif "table: .eh_frame of PROGRAM" in block or "the innermost frame" in lines[0]:
            kept.append(block)
        else:
            kept.append(lines[0])
    return "\n\n".join(kept) + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_explain_golden(case):
    gdb = need_tool("gdb")
    source, flags, stop, args, setup = CASES[case]
    binary = build(source, flags, name=case)
    cmd = [gdb, "-q", "-batch", "-nx", "-iex", "set style enabled off", "-ex", "set width 0",
           "-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT]
    for line in setup + ["break " + stop, "run " + " ".join(args)]:
        cmd += ["-ex", line]
    cmd += ["-ex", "echo @@@\\n", "-ex", "unwind explain all", str(binary)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    assert "@@@\n" in out, out[-2000:]
    got = own_blocks(normalise(out.split("@@@\n", 1)[1], binary))
    golden = GOLDEN / ("explain-%s.txt" % case)
    if os.environ.get("UNWIND_GOLDEN_UPDATE"):
        golden.write_text(got)
    assert got == golden.read_text()
