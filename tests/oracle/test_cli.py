"""`python -m plugin tables`: shape of its output and its errors, checked against readelf."""

import json
import subprocess
import sys

import pytest

from support import NO_EH, ROOT, build, need_tool, run, system_library
from cfi_dumps import readelf_fde_ranges


def plugin(*args):
    return subprocess.run([sys.executable, "-m", "plugin", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)



@pytest.mark.parametrize("target", ["fixture", "libc"])
def test_every_fde_is_listed_with_readelfs_ranges(target):
    path = build("chain.c", ["-O2"]) if target == "fixture" else system_library("libc.so.6")
    result = plugin("tables", path, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    eh = [s for s in data["sources"] if s["section"] == ".eh_frame"]
    assert len(eh) == 1 and eh[0]["kind"] == "cfi"
    ours = sorted((e["start"], e["end"]) for e in eh[0]["entries"])
    assert ours == readelf_fde_ranges(path)
    for entry in eh[0]["entries"]:
        assert entry["rows"], entry
        for row in entry["rows"]:
            assert entry["start"] <= row["address"] < entry["end"]
            assert row["cfa"]["kind"] in ("register", "expression")
            for rule in row["registers"].values():
                assert rule["kind"] in ("undefined", "same", "offset", "val_offset", "register",
                                        "expression", "val_expression")


def test_address_filter_gives_the_covering_entry_and_row():
    path = build("chain.c", ["-O0"])
    nm = run([need_tool("nm"), str(path)]).stdout
    level2 = int(next(l.split()[0] for l in nm.splitlines() if l.endswith(" level2")), 16)
    data = json.loads(plugin("tables", path, "--address", hex(level2 + 4), "--json").stdout)
    entries = [e for s in data["sources"] for e in s["entries"]]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["start"] == level2
    assert len(entry["rows"]) == 1
    row = entry["rows"][0]
    # -O0 x86_64: push rbp (1 byte) then mov rbp,rsp (3 bytes): from +4 the CFA is rbp+16.
    assert row["address"] == level2 + 4
    assert row["cfa"] == {"kind": "register", "register": "rbp", "offset": 16}
    assert row["registers"]["rip"] == {"kind": "offset", "offset": -8}
    assert row["registers"]["rbp"] == {"kind": "offset", "offset": -16}
    text = plugin("tables", path, "--address", hex(level2 + 4)).stdout
    assert "CFA=rbp+16 => rbp=[CFA-16] rip=[CFA-8]" in text


@pytest.mark.parametrize("args, message", [
    ([], "no command given"),
    (["tables"], "the following arguments are required: FILE"),
    (["tables", "/nonexistent/file"], "cannot open /nonexistent/file"),
    (["tables", __file__], "neither an ELF, Mach-O nor PE file: it starts with 22 22 22 60 (an unknown format)"),
    (["validate", __file__], "neither an ELF, Mach-O nor PE file"),
    (["tables", "/bin/true", "--address", "zzz"], "not an address"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = plugin(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_damaged_pe_file_is_refused_in_one_line(tmp_path):
    exe = tmp_path / "x.exe"
    exe.write_bytes(b"MZ\x90\x00" + bytes(60))
    result = plugin("tables", exe)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m plugin: error: cannot open %s: PE: e_lfanew 0x0 is outside the file's headers"
        % exe]
    result = plugin("tables", "--json", exe)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m plugin: error: cannot open %s: PE: e_lfanew 0x0 is outside the file's headers"
        % exe]
    for option in (("--sources", "cfi"), ("--sources", "pdata"), ("--json", "--sources", "cfi")):
        result = plugin("tables", *option, exe)
        assert result.returncode == 2 and result.stderr.strip().splitlines() == [
            "python -m plugin: error: cannot open %s: PE: e_lfanew 0x0 is outside the file's headers" % exe]
    result = plugin("validate", exe)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m plugin validate: error: cannot open %s: PE: e_lfanew 0x0 is outside the file's headers"
        % exe]


MISSING_ELFTOOLS = ("import runpy, sys; sys.modules['elftools'] = None; sys.argv = ['plugin'] + sys.argv[1:]; "
                    "runpy.run_module('plugin', run_name='__main__', alter_sys=True)")


def test_gdbinit_needs_no_pyelftools_and_tables_says_what_is_missing():
    """An interpreter without pyelftools still prints the loading line; `tables` says in one line what to install."""
    line = subprocess.run([sys.executable, "-c", MISSING_ELFTOOLS, "gdbinit"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert line.returncode == 0, line.stderr
    assert line.stdout.strip() == "source %s/gdb_unwinder/gdbinit.py" % ROOT
    tables = subprocess.run([sys.executable, "-c", MISSING_ELFTOOLS, "tables", "/bin/true"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert tables.returncode == 2
    assert "elftools is not installed for" in tables.stderr and "pip install pyelftools" in tables.stderr
    assert len(tables.stderr.strip().splitlines()) == 1 and "Traceback" not in tables.stderr


def test_several_files_in_one_process_each_as_alone():
    one, two = build("chain.c", ["-O2"]), system_library("libc.so.6")
    result = plugin("tables", one, "/nonexistent/file", two)
    assert result.returncode == 2                       # the worst of 0, 2 and 0
    assert result.stderr.strip() == "python -m plugin: error: cannot open /nonexistent/file: " \
                                    "No such file or directory"
    alone = [plugin("tables", path).stdout for path in (one, two)]
    assert result.stdout == "File: %s\n%s\nFile: /nonexistent/file\n\nFile: %s\n%s" % (
        one, alone[0], two, alone[1])
    assert "--json takes one FILE" in plugin("tables", one, two, "--json").stderr


def test_text_rows_are_the_json_rows():
    # Text mode shares the rows of FDEs with the same program (render/cfi_dump.py);
    # --json runs every FDE. Both must list the same rows at the same addresses.
    path = system_library("libstdc++.so.6")
    data = json.loads(plugin("tables", path, "--json").stdout)
    expected = []
    for source in data["sources"]:
        for entry in source["entries"]:
            expected.extend("    0x%x: %s" % (row["address"], text)
                            for row, text in zip(entry["rows"], entry["rows_text"]))
    text = plugin("tables", path).stdout
    rows = [line for line in text.splitlines() if line.startswith("    0x")]
    assert len(expected) > 30000
    assert rows == expected


def test_validate_on_a_file_whose_tables_objcopy_removed_says_so(tmp_path):
    """objcopy leaves PT_GNU_EH_FRAME behind with size 0: no table, not a read problem."""
    stripped = tmp_path / "stripped"
    run([need_tool("objcopy"), *NO_EH, str(build("chain.c", ["-O2"])), str(stripped)])
    result = plugin("validate", stripped)
    assert result.returncode == 0, result.stderr
    assert "stripped: no unwind tables (nothing to check)" in result.stdout
    assert "problem" not in result.stdout and "eh_frame_hdr" not in result.stdout
