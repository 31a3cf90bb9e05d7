"""GDB's `bt` ends at the program's first frame, not past it, where GDB alone walks past it.

A program without symbols and without tables: GDB cannot tell that the frame
of `_start` is the outermost (no symbol at the entry point for `backtrace
past-entry`, no CFI row marking the return address undefined), and its
prologue analyser reads argc, argv and the environment as return addresses.
The plugin proves the end from the entry code (gdb_unwinder/stack_end.py).

Oracle: GDB alone on the twin that keeps its tables (glibc's `_start` CFI
ends GDB's walk there), line for line; and GDB alone on the program itself,
which must print more frames (else the test shows nothing). Programs:
tests/fixtures/matrix.c (-O2 -fomit-frame-pointer, stripped) stopped in
stop_here, and Debian's own /usr/bin/ls (stripped as shipped) stopped at its
write system call. Where GDB is right (the twin, a program with symbols, a
thread's stack) the frame filter stays disabled, so GDB prints `bt` itself.
"""

import re
import shutil
import subprocess

import pytest

from support import BUILD, NO_TABLES, build, gdb_batch, need_tool
FILTER = "unwind-plugin-program-end"
ENABLED = "python print('ENABLED', gdb._unwind_plugin_state.program_end.enabled)"


def _gdb(binary, commands, plugin=True, args=(), stop=()):
    command = ["-ex", "set pagination off"]
    for line in list(stop) + ["run"] + list(commands):
        command += ["-ex", line]
    proc = gdb_batch(command + ["--args", str(binary), *args], plugin)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Python Exception" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def _bt(text, which=0):
    """The frame lines of a transcript's `bt` (which: the first, or after a core's stop line, the second)."""
    blocks = []
    for line in text.splitlines():
        if re.match(r"#\d+ ", line):
            if line.startswith("#0 ") or not blocks:
                blocks.append([])
            blocks[-1].append(line)
    return blocks[which] if len(blocks) > which else []


def _pcs(lines):
    return [line.split()[1] for line in lines]


def _enabled(text):
    return [line.split()[1] == "True" for line in text.splitlines() if line.startswith("ENABLED ")]


def _twins():
    twin = build("matrix.c", ["-O2", "-fomit-frame-pointer"], name="end-twin",
                 post=[["strip", "--strip-all", "{out}"]])
    bare = build("matrix.c", ["-O2", "-fomit-frame-pointer"], name="end-bare",
                 post=[["strip", "--strip-all", "{out}"], ["objcopy", *NO_TABLES, "{out}"]])
    return twin, bare


def test_bt_of_a_program_without_symbols_or_tables_ends_at_its_entry_frame(gdb_version):
    twin, bare = _twins()
    truth = _bt(_gdb(twin, ["bt"], plugin=False, args=["plain"]))
    alone = _bt(_gdb(bare, ["bt"], plugin=False, args=["plain"]))
    loaded = _gdb(bare, [ENABLED, "bt", "disable frame-filter global %s" % FILTER, "bt"], args=["plain"])
    assert len(truth) >= 5 and truth[0].startswith("#0 ")
    assert len(alone) > len(truth), (alone, truth)      # GDB alone reads argc, argv... as frames
    assert _bt(loaded) == truth, (loaded, truth)
    assert _enabled(loaded) == [True]
    # Disabled by the user: GDB's own printing and GDB's own end again.
    second = loaded.split("\n#0 ", 2)[-1].splitlines()
    assert len([line for line in second if re.match(r"#\d+ ", line)]) + 1 > len(truth)


def test_a_core_opened_without_the_program_ends_at_its_entry_frame(tmp_path, gdb_version):
    """`gdb -c CORE`: no objfile, no symbols; the entry point from the core's auxiliary vector."""
    twin, bare = _twins()
    truth = _pcs(_bt(_gdb(twin, ["bt"], plugin=False, args=["plain"])))
    core = tmp_path / "core"
    _gdb(bare, ["gcore %s" % core], plugin=False, args=["plain"])
    args = ["-ex", "set pagination off", "-c", str(core), "-ex", "bt"]
    alone, loaded = gdb_batch(args, plugin=False).stdout, gdb_batch(args).stdout
    assert "Traceback" not in loaded and "Python Exception" not in loaded, loaded
    assert _pcs(_bt(loaded, 1)) == truth, (loaded, truth)
    assert _pcs(_bt(alone, 1)) != truth, alone


def test_the_end_is_not_forced_where_gdb_is_right_or_asked_to_go_on(gdb_version):
    twin, bare = _twins()
    # The twin keeps its tables: GDB ends the walk itself, and prints bt itself.
    assert _enabled(_gdb(twin, [ENABLED], args=["plain"])) == [False]
    # `set backtrace past-entry on` asks GDB to go past the entry function: so does the plugin.
    text = _gdb(bare, ["set backtrace past-entry on", ENABLED, "bt"], args=["plain"])
    assert _enabled(text) == [False]
    assert len(_bt(text)) > len(_bt(_gdb(twin, ["bt"], plugin=False, args=["plain"])))
    # A thread's stack does not reach the program's entry code: the filter is off there.
    text = _gdb(bare, ["thread 1", ENABLED, "thread 2", ENABLED], args=["thread"])
    assert _enabled(text) == [True, False], text


def test_debian_ls_without_its_tables_ends_where_ls_with_them_ends(gdb_version):
    # Two copies, paths of one length: argv and the environment lie at the same addresses.
    kept, bare = BUILD / "ls-kept", BUILD / "ls-bare"
    BUILD.mkdir(parents=True, exist_ok=True)
    if not kept.exists():
        shutil.copy("/usr/bin/ls", kept)
    if not bare.exists():
        subprocess.run(["objcopy", *NO_TABLES, "/usr/bin/ls", str(bare)], check=True)
    stop = ["catch syscall write"]
    truth = _bt(_gdb(kept, ["bt"], plugin=False, args=["/"], stop=stop))
    alone = _bt(_gdb(bare, ["bt"], plugin=False, args=["/"], stop=stop))
    loaded = _gdb(bare, [ENABLED, "bt"], args=["/"], stop=stop)
    assert len(truth) >= 8 and "_start_main" in truth[-2]
    assert _bt(loaded) == truth, (loaded, truth)
    assert alone != truth
    assert _enabled(loaded) == [True]
    # Debian's ls as shipped: GDB ends at _start by its CFI, and prints bt itself.
    shipped = _gdb(kept, [ENABLED, "bt"], args=["/"], stop=stop)
    assert _enabled(shipped) == [False] and _bt(shipped) == truth


def test_before_the_program_starts_bt_ends_at_the_dynamic_loaders_entry_frame(gdb_version):
    """Stopped in ld.so's _dl_start (called by its _start, which the kernel started): GDB alone reads
    argc and argv as frames after _start. Oracle: readelf's entry point of ld.so and objdump's first
    call in its entry code (the return address of _start's frame), the loader's base from GDB."""
    loader = "/lib64/ld-linux-x86-64.so.2"
    entry = int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)",
                          subprocess.run([need_tool("readelf"), "-h", loader], capture_output=True,
                                         text=True).stdout).group(1), 16)
    code = subprocess.run([need_tool("objdump"), "-d", "--start-address=%#x" % entry,
                           "--stop-address=%#x" % (entry + 64), loader], capture_output=True, text=True).stdout
    lines = [line for line in code.splitlines() if re.match(r"\s+[0-9a-f]+:\t", line)]
    call = next(i for i, line in enumerate(lines) if "\tcall" in line)
    first_call_end = int(lines[call + 1].split(":")[0], 16)
    stop = ["set breakpoint pending on", "break _dl_start"]
    alone = _bt(_gdb("/usr/bin/true", ["bt"], plugin=False, stop=stop))
    loaded = _gdb("/usr/bin/true", [ENABLED, "info auxv", "bt"], stop=stop)
    base = int(re.search(r"AT_BASE\s.*\s(0x[0-9a-f]+)", loaded).group(1), 16)
    frames = _bt(loaded)
    # GDB's frame-filter printing has no "from LIBRARY" (py-framefilter.c prints a frame's filename
    # after "at"): a frame without line information in a library reads "at LIBRARY" there.
    assert frames[1].endswith(" at " + loader) and alone[1].endswith(" from " + loader)
    assert len(alone) > 2 and alone[:2] == [frames[0], frames[1].replace(" at " + loader, " from " + loader)], \
        (alone, loaded)
    assert len(frames) == 2 and "_dl_start" in frames[0], loaded
    assert int(frames[1].split()[1], 16) == base + first_call_end, (loaded, hex(base), hex(first_call_end))
    assert _enabled(loaded) == [True]
