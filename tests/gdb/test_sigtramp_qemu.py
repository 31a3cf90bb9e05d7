"""GDB's own arm-linux sigtramp unwinder under qemu-arm, and the frame the plugin claims in its place.

qemu-arm writes 0 in a `sigreturn` frame's uc_flags, where Linux writes 0x5ac3c35a; GDB's
arm-linux unwinder then takes the frame layout of Linux before 2.6.18 and reads the
interrupted registers 20 bytes off (gdb_unwinder/sigtramp.py). Truth: GDB's own memory reads
of the frame (`x/wx $sp` in the trampoline's frame) and qemu's shadow call stack, through the
matrix's rows (tests/helpers/matrix.py); the program is sigstop.c raising SIGUSR1 in armhf
Debian's libc.
"""
from __future__ import annotations

import re

import pytest

import matrix

ROWS = [row for row in matrix.rows() if row.program == "sigstop.c" and row.arch.startswith("arm")
        and row.name.endswith("raise signal -O2")]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_the_trampoline_frame_gdb_misreads_is_claimed_and_explained(row):
    _, binary = matrix.binaries(row)
    results = matrix.run_at_row(row, binary, [
        ("off", "cmd", "disable unwinder global unwind-plugin"),
        ("alone", "cmd", "bt"),
        ("on", "cmd", "enable unwinder global unwind-plugin"),
        ("loaded", "cmd", "bt"),
        ("uc_flags", "cmd", "frame 2\nx/wx $sp"),
        ("explain", "cmd", "unwind explain 3"),
    ])
    alone, loaded = results["alone"], results["loaded"]
    assert "<signal handler called>" in alone and re.search(r"#3 +0x00000000 in \?\?", alone), alone
    names = re.findall(r"^#\d+ +(?:0x[0-9a-f]+ in )?(\S+) \(", loaded, re.MULTILINE)
    assert names[:2] == ["stop_here", "handler"] and "raise" in names and names.index("deliver") \
        < names.index("main"), loaded
    word = int(results["uc_flags"].split(":")[-1].split()[0], 16)
    assert word != 0x5ac3c35a       # what makes GDB take the old layout
    explain = results["explain"]
    assert "GDB's arm-linux sigtramp unwinder takes the signal frame layout of Linux before 2.6.18" \
        in explain, explain
    assert "plugin looks right" in explain and "the debugger's 0x0 is not code" in explain, explain
    assert "uc_flags at sp" in explain and ("is 0x%x, not 0x5ac3c35a" % word) in explain, explain


PLACED = ("python from gdb_unwinder import objfiles; import gdb; s = gdb._unwind_plugin_state; "
          "t = s.inferior().target; p = gdb.selected_inferior().progspace; refs = objfiles.module_refs(p); "
          "print('LINKMAP', sorted((r.path, r.header_address) for r in objfiles.link_map_refs(p, refs, t.read_memory))); "
          "print('COMMANDS', sorted((r.path, r.header_address) for r in objfiles.refs_from_commands() "
          "if r.path not in {x.path for x in refs}))")


def test_the_loaders_list_places_the_libraries_info_sharedlibrary_places():
    """qemu-user has no mapping list, and the unwinder may run no GDB command: the libraries
    without debug information are placed from the loader's list in memory, where GDB's own
    `info sharedlibrary` (outside the unwinder) places them."""
    row = ROWS[0]
    _, binary = matrix.binaries(row)
    out = matrix.run_at_row(row, binary, [("placed", "cmd", PLACED)])["placed"]
    linkmap = re.search(r"^LINKMAP (.*)$", out, re.MULTILINE).group(1)
    commands = re.search(r"^COMMANDS (.*)$", out, re.MULTILINE).group(1)
    assert "libc.so.6" in linkmap and linkmap == commands, out
