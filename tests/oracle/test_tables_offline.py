"""`python -m plugin tables` on bad, hostile and unusual input: a bad entry
costs only itself (exit 1), unusable input is one line and exit 2, every run
bounded; sizes from the file; compressed .debug_frame. Oracle: readelf."""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import crafted_elf
from support import BUILD, ROOT, build, need_tool, run, system_library
from cfi_dumps import readelf_fde_ranges

LIMIT_SECONDS = 10
LIMIT_KB = 500 * 1024


def measured(*args):
    """(exit status, stdout, stderr, seconds, peak RSS in KB) of the offline command."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "plugin", *map(str, args)], cwd=ROOT,
                                stdout=out, stderr=err)
        timer = threading.Timer(120, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(), err.read().decode(),
                time.monotonic() - started, usage.ru_maxrss)



def cfi_entries(stdout, section=".eh_frame"):
    data = json.loads(stdout)
    return [e for s in data["sources"] if s["section"] == section for e in s["entries"]]


def crafted(name, data):
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / ("crafted-%s-%d" % (name, os.getpid()))
    path.write_bytes(data)
    return path


def assert_one_line_exit_2(rc, out, err, message):
    assert rc == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in out + err


# --- unusable input -------------------------------------------------------------------------

def test_non_regular_and_empty_files_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path, message in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                          ("/dev/urandom", "not a regular file"), (empty, "empty file"),
                          (tmp_path, "cannot open")):
        rc, out, err, seconds, _ = measured("tables", path)
        assert_one_line_exit_2(rc, out, err, message)
        assert seconds < LIMIT_SECONDS


def test_section_header_offset_beyond_2_63():
    data = crafted_elf.section_header_offset(build("chain.c", ["-O2"]).read_bytes())
    rc, out, err, seconds, peak = measured("tables", crafted("shoff", data))
    assert_one_line_exit_2(rc, out, err, "cannot open")
    assert seconds < LIMIT_SECONDS and peak < LIMIT_KB


def test_huge_zero_fill_and_huge_fde_length_stay_bounded():
    original = build("chain.c", ["-O2"]).read_bytes()
    data = crafted_elf.huge_first_fde_length(crafted_elf.huge_last_load_memsz(original))
    path = crafted("memsz-fde", data)
    rc, out, err, seconds, peak = measured("tables", path, "--json")
    assert "Traceback" not in err
    assert seconds < LIMIT_SECONDS and peak < LIMIT_KB, (seconds, peak)
    assert rc == 1, err
    problems = json.loads(out)["problems"]
    assert any("entry length 0x40000000" in p for p in problems), problems


# --- containment ---------------------------------------------------------------------------

def test_one_bad_fde_costs_only_itself():
    path = build("chain.c", ["-O2"])
    data = bytearray(path.read_bytes())
    start, _ = crafted_elf.section_offset(bytes(data), ".eh_frame")
    cie_length = int.from_bytes(data[start:start + 4], "little")
    first_fde = start + 4 + cie_length
    data[first_fde + 4:first_fde + 8] = (0x7FFFFFF0).to_bytes(4, "little")    # CIE pointer to nowhere
    rc, out, err, _, _ = measured("tables", crafted("badcie", bytes(data)), "--json")
    assert rc == 1, err
    expected = readelf_fde_ranges(path)
    listed = sorted((e["start"], e["end"]) for e in cfi_entries(out))
    assert len(listed) == len(expected) - 1 and set(listed) < set(expected)
    [problem] = json.loads(out)["problems"]
    assert ".eh_frame+0x%x" % (first_fde - start) in problem


def test_libgcrypt_lists_every_fde_and_keeps_the_offset_as_libgcc_does():
    path = system_library("libgcrypt.so.20")
    rc, out, err, _, _ = measured("tables", path, "--json")
    assert rc == 0, err
    entries = cfi_entries(out)
    assert sorted((e["start"], e["end"]) for e in entries) == readelf_fde_ranges(path)
    noted = [(e, r) for e in entries for r in e["rows"] if r.get("note")]
    assert noted
    interp = run([need_tool("readelf"), "--debug-dump=frames-interp", str(path)]).stdout
    for entry, row in noted:
        assert "kept the previous offset %d" % row["cfa"]["offset"] in row["note"]
        # readelf's table has the same register+offset CFA at that address.
        line = re.search(r"^%016x (\S+)" % row["address"], interp, re.M)
        assert line and line.group(1) == "%s%+d" % (row["cfa"]["register"], row["cfa"]["offset"])


def test_libcc1_without_a_terminator_is_sized_by_its_section_header():
    path = Path(run(["gcc", "-print-file-name=libcc1.so"]).stdout.strip()).resolve()
    rc, out, err, _, _ = measured("tables", path, "--json")
    assert rc == 0, (err, json.loads(out)["problems"])
    expected = readelf_fde_ranges(path)
    assert len(expected) > 100
    assert sorted((e["start"], e["end"]) for e in cfi_entries(out)) == expected
    start, end = expected[len(expected) // 2]
    rc, out, err, _, _ = measured("tables", path, "--json", "--address", hex(start))
    assert rc == 0 and [(e["start"], e["end"]) for e in cfi_entries(out)] == [(start, end)]


# --- compressed .debug_frame ---------------------------------------------------------------

def debug_frame_build(method=None):
    post = [["objcopy", "--compress-debug-sections=%s" % method, "{out}"]] if method else None
    return build("chain.c", ["-O1", "-fno-asynchronous-unwind-tables"], post=post,
                 name="chain-df-%s" % (method or "plain"))


def debug_frame_rows(path):
    rc, out, err, _, _ = measured("tables", path, "--json")
    assert rc == 0, err
    return [(e["start"], e["end"], e["rows"]) for e in cfi_entries(out, ".debug_frame")]


@pytest.mark.parametrize("method, section", [("zlib", ".debug_frame"), ("zstd", ".debug_frame"),
                                             ("zlib-gnu", ".zdebug_frame")])
def test_compressed_debug_frame_decodes_to_the_same_rows(method, section):
    plain = debug_frame_build()
    packed = debug_frame_build(method)
    headers = run([need_tool("readelf"), "-S", "-W", str(packed)]).stdout
    assert re.search(r"\] %s\s" % re.escape(section), headers)
    rows = debug_frame_rows(plain)
    assert [(s, e) for s, e, _ in rows] == readelf_fde_ranges(plain, ".debug_frame")
    assert rows and debug_frame_rows(packed) == rows


def test_a_compression_header_that_lies_about_its_size():
    packed = debug_frame_build("zlib")
    data = bytearray(packed.read_bytes())
    start, _ = crafted_elf.section_offset(bytes(data), ".debug_frame")
    size = int.from_bytes(data[start + 8:start + 16], "little")             # Elf64_Chdr.ch_size
    for declared, words in ((size + 1, "declares %d bytes" % (size + 1)), (1 << 40, "over the limit")):
        data[start + 8:start + 16] = declared.to_bytes(8, "little")
        rc, out, err, _, _ = measured("tables", crafted("chdr", bytes(data)), "--json")
        assert rc == 1 and "Traceback" not in err
        problems = json.loads(out)["problems"]
        assert any(".debug_frame" in p and words in p for p in problems), problems
        assert not cfi_entries(out, ".debug_frame")


# --- relocatable objects -------------------------------------------------------------------

def readelf_relocated_targets(path, section):
    """{offset in section: symbol name} of the relocations readelf lists for it."""
    out = run([need_tool("readelf"), "-r", "-W", str(path)]).stdout
    targets, current = {}, None
    for line in out.splitlines():
        header = re.match(r"Relocation section '\.rela?(\S+)'", line)
        if header:
            current = header.group(1)
            continue
        fields = line.split()
        if current == section and len(fields) >= 5 and re.fullmatch(r"[0-9a-f]{8,}", fields[0]):
            targets[int(fields[0], 16)] = fields[4]
    return targets


def test_crt1_ranges_are_relocated_against_text():
    path = "/usr/lib/x86_64-linux-gnu/crt1.o"
    rc, out, err, _, _ = measured("tables", path, "--json")
    assert rc == 0, err
    entries = cfi_entries(out)
    assert sorted((e["start"], e["end"]) for e in entries) == readelf_fde_ranges(path)
    assert {e["relative_to"] for e in entries} == {".text"}
    text = measured("tables", path)[1]
    for start, end in readelf_fde_ranges(path):
        assert "  [.text+0x%x, .text+0x%x) FDE" % (start, end) in text


@pytest.mark.parametrize("flags, section", [(["-fasynchronous-unwind-tables"], ".eh_frame"),
                                            (["-fno-asynchronous-unwind-tables"], ".debug_frame")])
def test_object_with_function_sections(flags, section):
    path = build("chain.c", ["-c", "-O2", "-ffunction-sections", *flags],
                 name="chain-obj-%s" % section.strip("."))
    rc, out, err, _, _ = measured("tables", path, "--json")
    assert rc == 0, err
    entries = cfi_entries(out, section)
    assert sorted((e["start"], e["end"]) for e in entries) == readelf_fde_ranges(path, section)
    targets = readelf_relocated_targets(path, section)
    for entry in entries:
        # The relocation at the FDE's pc_begin names the section it describes.
        assert entry["relative_to"] == targets[entry["fde_offset"] + 8], entry
    assert len({e["relative_to"] for e in entries}) == len(entries) > 1


# --- a CIE whose return-address column is not the ABI's -------------------------------------

def test_cie_with_another_return_address_column_is_refused():
    from plugin.engine import UnwindContext
    from plugin.model.evidence import Frame
    from plugin.model.outcome import AttemptStatus
    from plugin.strategies import cfi as cfi_strategy
    from plugin.file_targets.elf import FileTarget
    path = build("chain.c", ["-O2"])
    data = bytearray(path.read_bytes())
    start, _ = crafted_elf.section_offset(bytes(data), ".eh_frame")
    # CIE: length, id, version 1, "zR\0", code align 1, data align -8, RA column (1 byte).
    assert data[start + 8:start + 14] == b"\x01zR\x00\x01\x78"
    ra_byte = start + 14
    assert data[ra_byte] == 16 == int(re.search(r"Return address column:\s+(\d+)", run(
        [need_tool("readelf"), "--debug-dump=frames", str(path)]).stdout).group(1))
    data[ra_byte] = 6                                                    # rbp
    patched = crafted("racolumn", bytes(data))
    rc, out, err, _, _ = measured("tables", patched, "--json")
    assert rc == 1, err
    refused = [e for e in cfi_entries(out) if e.get("refused")]
    assert refused and all("return-address column 6 (rbp), not the ABI's 16 (rip)" in e["refused"]
                           for e in refused)
    target = FileTarget(str(patched))
    ctx = UnwindContext(target, sources=("cfi",))
    pc = refused[0]["start"]
    frame = Frame(level=0, pc=pc, registers={16: pc, 7: 0x7ff000, 6: 0}, method="context", exact_pc=True)
    outcome = cfi_strategy.step(frame, ctx)
    assert outcome.status == AttemptStatus.FAILED and "return-address column 6" in outcome.reason


def test_an_address_in_no_module_is_not_a_bad_entry():
    rc, out, err, _, _ = measured("tables", build("chain.c", ["-O2"]), "--json", "--address", "0x7fff00000000")
    assert rc == 0, err
    assert json.loads(out)["problems"] == ["no module contains 0x7fff00000000"]


def test_huge_sframe_fde_count_in_a_huge_zero_fill_stays_bounded():
    original = build("chain.c", ["-O2", "-Wa,--gsframe"], name="chain-sframe").read_bytes()
    data = crafted_elf.huge_last_load_memsz(crafted_elf.huge_sframe(original))
    rc, out, err, seconds, peak = measured("tables", crafted("sframe-count", data), "--json")
    assert "Traceback" not in err
    assert seconds < LIMIT_SECONDS and peak < LIMIT_KB, (seconds, peak)
    assert rc == 1, err
    problems = json.loads(out)["problems"]
    assert any(".sframe" in p for p in problems), problems
    assert [s["section"] for s in json.loads(out)["sources"]] == [".eh_frame"]    # the CFI is still listed


# --- x32: 32-bit ELF for x86-64 -------------------------------------------------------------

@pytest.mark.parametrize("flags", [["-mx32"], ["-mx32", "-c"]], ids=["executable", "object"])
def test_x32_is_refused_in_one_line(flags):
    path = build("chain.c", ["-O2", *flags], name="chain-x32" + "".join(flags))
    header = run([need_tool("readelf"), "-h", str(path)]).stdout
    assert re.search(r"Class:\s+ELF32", header) and re.search(r"Machine:\s+Advanced Micro Devices X86-64", header)
    rc, out, err, seconds, _ = measured("tables", path)
    assert_one_line_exit_2(rc, out, err, "32-bit ELF for x86_64 (the x32 ABI) is not supported")
    assert out == "" and seconds < LIMIT_SECONDS


# --- a separate debug-info file: .eh_frame and .eh_frame_hdr are SHT_NOBITS ---------------

def test_separate_debug_file_has_no_eh_frame_and_no_problem():
    path = build("chain.c", ["-O2"], name="chain-debuginfo", post=[["objcopy", "--only-keep-debug", "{out}"]])
    headers = run([need_tool("readelf"), "-S", "-W", str(path)]).stdout
    assert re.search(r"\.eh_frame\s+NOBITS", headers) and re.search(r"\.eh_frame_hdr\s+NOBITS", headers), headers
    rc, out, err, _, _ = measured("tables", path)
    assert (rc, err) == (0, ""), (out, err)
    assert "problem" not in out and out.strip() == "no unwind tables found", out
