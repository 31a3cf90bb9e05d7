"""The `analysis` source finds a function's start from its neighbour's table, in GDB.

tests/fixtures/neighbour.c: `notable` is compiled without unwind tables,
linked just after `neighbour` (which has an FDE), reached only through a
function pointer and without a frame-record prologue; the program is then
stripped of its symbols. So the start of `notable` is known from nothing
but the end of `neighbour`'s FDE (after the linker's alignment padding).

x86_64 natively, with the neighbour's .eh_frame FDE or (assembled with
--gsframe, .eh_frame removed) its SFrame FDE; aarch64 (static) under
qemu-user with gdb-multiarch. Oracle: GDB's own backtrace of the twin
whose `notable` keeps its FDE (and its symbols); the twin's .text is
checked to be byte for byte the program's.
Control: the same program with every table removed (objcopy) loses that
start: the analysis can then only read `notable` forward from the pc, and
where it decides so it must equal the twin.
"""

import subprocess

import pytest

from gdbrun import run_gdb
from support import BUILD, FIXTURES, NO_EH, need_tool

SOURCE = FIXTURES / "neighbour.c"
FLAGS = ["-O2", "-fomit-frame-pointer"]
WALK = "unwind explain -json -sources %s all"
# the case: (architecture, the neighbour's table as the evidence names it, assembler flags, what
# objcopy removes besides the symbols, the sources walked)
CASES = {
    "x86_64-eh_frame": ("x86_64", ".eh_frame FDE", [], [], "cfi,analysis"),
    "x86_64-sframe": ("x86_64", ".sframe FDE", ["-Wa,--gsframe"], NO_EH, "sframe,analysis"),
    "aarch64-eh_frame": ("aarch64", ".eh_frame FDE", [], [], "cfi,analysis"),
}
TOOLS = {"x86_64": ("gcc", "objcopy", "nm", []),
         "aarch64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objcopy", "aarch64-linux-gnu-nm", ["-static"])}


def _build(name, arch, notable_tables, post=(), flags=()):
    out = BUILD / name
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    cc, objcopy, _, link = TOOLS[arch]
    tables, notable = BUILD / (name + "-tables.o"), BUILD / (name + "-notable.o")
    run = lambda cmd: subprocess.run([str(part) for part in cmd], check=True, capture_output=True, text=True)
    run([need_tool(cc), "-g", *FLAGS, *flags, "-DPART_TABLES", "-c", SOURCE, "-o", tables])
    run([need_tool(cc), *FLAGS, *flags, "-DPART_NOTABLE", "-c", SOURCE, "-o", notable]
        + ([] if notable_tables else ["-fno-asynchronous-unwind-tables", "-fno-unwind-tables"]))
    tmp = out.with_suffix(".tmp")
    run([need_tool(cc), *link, "-o", tmp, tables, notable])    # this order: neighbour's FDE ends just below notable
    for step in post:
        run([need_tool(objcopy), *step, tmp])
    tmp.rename(out)
    return out


def _gdb(arch, binary, actions):
    if arch == "x86_64":
        return run_gdb(binary, actions, breakpoint=None)[0]
    from qemu_user import qemu_user
    with qemu_user("qemu-aarch64", binary, [], options=("-cpu", "max,sve=off")) as address:
        return run_gdb(binary, actions, breakpoint=None, gdb_program="gdb-multiarch", remote=address,
                       timeout=300)[0]


def _text(arch, binary):
    return subprocess.run([need_tool(TOOLS[arch][1]), "-O", "binary", "--only-section=.text", str(binary),
                           "/dev/stdout"], check=True, capture_output=True).stdout


def _runtime_start(arch, binary, name, pc):
    """The run-time address of function `name` (nm -S) whose code holds pc (PIE: loaded at GDB's bias)."""
    listing = subprocess.run([need_tool(TOOLS[arch][2]), "-S", str(binary)], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            for bias in (0, 0x555555554000):
                if start + bias <= pc < start + size + bias:
                    return start + bias
    raise AssertionError("no function %s holding 0x%x in %s" % (name, pc, binary))


def _relative(frames):
    return [(f["pc"], f["sp"] - frames[0]["sp"]) for f in frames]


@pytest.mark.parametrize("case", sorted(CASES))
def test_start_from_the_neighbouring_table_recovers_every_frame(case):
    arch, named, flags, removed, sources = CASES[case]
    twin = _build("neighbour-twin-" + arch, arch, True)
    program = _build("neighbour-stripped-" + case, arch, False, post=[["--strip-all", *removed]], flags=flags)
    assert _text(arch, twin) == _text(arch, program)
    listing = subprocess.run([need_tool(TOOLS[arch][2]), str(program)], capture_output=True, text=True)
    assert "no symbols" in listing.stderr
    truth = _gdb(arch, twin, [("off", "cmd", "disable unwinder global unwind-plugin"),
                              ("truth", "frames", None)])["truth"]
    names = [f["name"] for f in truth]
    assert names[:3] == ["stop_here", "notable", "main"], names
    truth = truth[:3]

    frames = _gdb(arch, program, [("walk", "json", WALK % sources)])["walk"]["frames"]
    got = [{"pc": f["pc"], "sp": f["sp"]} for f in frames[:3]]
    assert _relative(got) == _relative(truth), (got, truth)
    # frame #2 (main) was recovered from frame #1 (notable) by the analysis, started at
    # notable's first instruction as found from neighbour's FDE
    main = frames[2]
    assert main["method"] == "analysis", main
    entry = main["evidence"]["entry"]
    assert entry["start_by"] == "table", entry
    assert entry["start"] == _runtime_start(arch, twin, "notable", truth[1]["pc"]), (hex(entry["start"]), truth[1])
    notes = " ".join(main["evidence"]["notes"])
    assert named in notes and "just below the pc" in notes and "padding" in notes, notes


def test_without_the_neighbours_table_the_start_is_not_found():
    program = _build("neighbour-notables", "x86_64", False, post=[["--strip-all"], NO_EH])
    frames = _gdb("x86_64", program, [("walk", "json", WALK % "cfi,analysis")])["walk"]["frames"]
    # stop_here is reached by a direct call (its start is found by that call); notable is not:
    # its start is unknown, so the analysis may only read it forward from the pc (every path to
    # its returns), and what it finds so must be the twin's truth
    assert frames[1]["method"] == "analysis"
    assert frames[1]["evidence"]["entry"]["start_by"] == "call", frames[1]["evidence"]["entry"]
    if len(frames) > 2 and frames[2]["method"] == "analysis":
        assert frames[2]["evidence"]["entry"]["start_by"] == "forward", frames[2]["evidence"]["entry"]
        twin = _build("neighbour-twin-x86_64", "x86_64", True)
        assert _text("x86_64", twin) == _text("x86_64", program)
        truth = _gdb("x86_64", twin, [("off", "cmd", "disable unwinder global unwind-plugin"),
                                      ("truth", "frames", None)])["truth"][:3]
        got = [{"pc": f["pc"], "sp": f["sp"]} for f in frames[:3]]
        assert _relative(got) == _relative(truth), (got, truth)
