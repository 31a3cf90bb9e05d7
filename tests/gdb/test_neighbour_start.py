"""The `analysis` source finds a function's start from its neighbour's table, in GDB.

tests/fixtures/neighbour.c: `notable` is compiled without unwind tables,
linked just after `neighbour` (which has an FDE), reached only through a
function pointer and without a frame-record prologue; the program is then
stripped of its symbols. So the start of `notable` is known from nothing
but the end of `neighbour`'s FDE (after the linker's alignment padding).

The neighbour's table is its .eh_frame FDE, or (assembled with --gsframe,
.eh_frame removed) its SFrame FDE. Oracle: GDB's own backtrace of the twin
whose `notable` keeps its FDE (and its symbols); the twin's .text is checked
to be byte for byte the program's.
Control: the same program with every table removed (objcopy) loses that
start, and the analysis cannot unwind `notable` there.
"""

import subprocess

import pytest

from gdbrun import run_gdb
from support import BUILD, FIXTURES, need_tool

SOURCE = FIXTURES / "neighbour.c"
FLAGS = ["-O2", "-fomit-frame-pointer"]
WALK = "unwind explain -json -sources %s all"
NO_TABLES = ["--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr"]


def _build(name, notable_tables, post=(), flags=()):
    out = BUILD / name
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tables, notable = BUILD / (name + "-tables.o"), BUILD / (name + "-notable.o")
    run = lambda cmd: subprocess.run([str(part) for part in cmd], check=True, capture_output=True, text=True)
    run(["gcc", "-g", *FLAGS, *flags, "-DPART_TABLES", "-c", SOURCE, "-o", tables])
    run(["gcc", *FLAGS, *flags, "-DPART_NOTABLE", "-c", SOURCE, "-o", notable]
        + ([] if notable_tables else ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"]))
    tmp = out.with_suffix(".tmp")
    run(["gcc", "-o", tmp, tables, notable])         # this order: neighbour's FDE ends just below notable
    for step in post:
        run(["objcopy", *step, tmp])
    tmp.rename(out)
    return out


def _text(binary):
    return subprocess.run([need_tool("objcopy"), "-O", "binary", "--only-section=.text", str(binary), "/dev/stdout"],
                          check=True, capture_output=True).stdout


def _runtime_start(binary, name, pc):
    """The run-time address of function `name` (nm -S) whose code holds pc (PIE: loaded at GDB's bias)."""
    for line in subprocess.run([need_tool("nm"), "-S", str(binary)], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            for bias in (0, 0x555555554000):
                if start + bias <= pc < start + size + bias:
                    return start + bias
    raise AssertionError("no function %s holding 0x%x in %s" % (name, pc, binary))


def _relative(frames):
    return [(f["pc"], f["sp"] - frames[0]["sp"]) for f in frames]


# the neighbour's table: (its section in the evidence, assembler flags, what objcopy removes, sources)
TABLES = {
    "eh_frame": (".eh_frame FDE", [], [], "cfi,analysis"),
    "sframe": (".sframe FDE", ["-Wa,--gsframe"], NO_TABLES, "sframe,analysis"),
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_start_from_the_neighbouring_table_recovers_every_frame(table):
    named, flags, removed, sources = TABLES[table]
    twin = _build("neighbour-twin", True)
    program = _build("neighbour-stripped-" + table, False, post=[["--strip-all", *removed]], flags=flags)
    assert _text(twin) == _text(program)
    assert "no symbols" in subprocess.run(["nm", str(program)], capture_output=True, text=True).stderr
    truth = run_gdb(twin, [("off", "cmd", "disable unwinder global unwind-plugin"), ("truth", "frames", None)],
                    breakpoint=None)[0]["truth"]
    names = [f["name"] for f in truth]
    assert names[:3] == ["stop_here", "notable", "main"], names
    truth = truth[:3]

    results = run_gdb(program, [("walk", "json", WALK % sources)], breakpoint=None)[0]
    frames = results["walk"]["frames"]
    got = [{"pc": f["pc"], "sp": f["registers"]["rsp"]} for f in frames[:3]]
    assert _relative(got) == _relative(truth), (got, truth)
    # frame #2 (main) was recovered from frame #1 (notable) by the analysis, started at
    # notable's first instruction as found from neighbour's FDE
    main = frames[2]
    assert main["method"] == "analysis", main
    entry = main["evidence"]["entry"]
    assert entry["start_by"] == "table", entry
    assert entry["start"] == _runtime_start(twin, "notable", truth[1]["pc"]), (hex(entry["start"]), truth[1])
    notes = " ".join(main["evidence"]["notes"])
    assert named in notes and "just below the pc" in notes and "padding" in notes, notes


def test_without_the_neighbours_table_the_start_is_not_found():
    program = _build("neighbour-notables", False, post=[["--strip-all"], NO_TABLES])
    results = run_gdb(program, [("walk", "json", WALK % "cfi,analysis")], breakpoint=None)[0]
    frames = results["walk"]["frames"]
    # stop_here is reached by a direct call (its start is found by that call); notable is not
    assert frames[1]["method"] == "analysis"
    assert frames[1]["evidence"]["entry"]["start_by"] == "call", frames[1]["evidence"]["entry"]
    assert len(frames) == 2 or frames[2]["method"] != "analysis", [(hex(f["pc"]), f["method"]) for f in frames]
