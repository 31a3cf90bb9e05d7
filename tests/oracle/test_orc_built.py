"""`python -m plugin tables` on small executables whose ORC sections the GNU
assembler lays out (it computes each `.long label - .`, the relative ip), and on
damaged ones: each bad table is one problem line, never a traceback."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
V3_HASH = "fe5d32bf581bd63b2ca9a5c65ba5a625eab3fe24"


def build(tmp_path, name, ips, entries, header=None, extra=""):
    source = [".globl _start", ".text", "_start:", "  push %rbp", "  mov %rsp, %rbp", "  pop %rbp", "  ret",
              "after:", "  nop", '.section .orc_unwind_ip,"a"']
    source += ["  .long %s - ." % ip for ip in ips]
    source += ['.section .orc_unwind,"a"']
    source += ["  .short %d, %d, 0x%x" % entry for entry in entries]
    if header is not None:
        source += ['.section .orc_header,"a"', "  .byte " + ", ".join("0x%s" % header[i:i + 2]
                                                                   for i in range(0, len(header), 2))]
    source.append(extra)
    (tmp_path / (name + ".s")).write_text("\n".join(source) + "\n")
    subprocess.run(["as", "-o", str(tmp_path / (name + ".o")), str(tmp_path / (name + ".s"))], check=True)
    subprocess.run(["ld", "-o", str(tmp_path / name), str(tmp_path / (name + ".o"))], check=True)
    return tmp_path / name


def tables(path, *args):
    return subprocess.run([sys.executable, "-m", "plugin", "tables", str(path)] + list(args),
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)


def symbol(path, name):
    out = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    return next(int(line.split()[0], 16) for line in out.splitlines() if line.split()[-1] == name)


ROWS = ["_start", "_start + 1", "_start + 4", "after"]
V3 = [(8, 0, 0x205), (16, -16, 0x215), (8, 0, 0x205), (0, 0, 0x0100)]


def test_v3_by_header(tmp_path):
    path = build(tmp_path, "v3", ROWS, V3, header=V3_HASH)
    out = tables(path, "--json")
    assert out.returncode == 0, out.stderr
    (source,) = [s for s in json.loads(out.stdout)["sources"] if s["kind"] == "orc"]
    start = symbol(path, "_start")
    assert [e["start"] for e in source["entries"]] == [start, start + 1, start + 4, symbol(path, "after")]
    assert source["layout"] == "v6.4+" and source["layout_found_by"] == ".orc_header hash"
    assert [e["text"] for e in source["entries"]] == [
        "cfa=sp+8 bp=unchanged call", "cfa=sp+16 bp=[cfa-16] call", "cfa=sp+8 bp=unchanged call",
        "cfa=undefined bp=unchanged end of stack"]
    text = tables(path, "--address", hex(start + 2)).stdout
    assert "[0x%x, 0x%x) cfa=sp+16 bp=[cfa-16] call" % (start + 1, start + 4) in text


def test_layout_by_version_string_and_by_bits(tmp_path):
    v1 = [(8, 0, 0x005), (16, -16, 0x015), (8, 0, 0x005), (0, 0, 0x400)]
    path = build(tmp_path, "v1", ROWS, v1, extra='.section .rodata\n  .ascii "Linux version 6.1.0-50-amd64 (x)"')
    out = tables(path)
    assert "ORC layout v4.14-v6.2 (by kernel version string), kernel 6.1.0-50-amd64" in out.stdout
    assert "cfa=undefined bp=unchanged end of stack end" in out.stdout
    out = tables(build(tmp_path, "bits", ROWS + ["after"], V3 + [(160, 0, 0x305)]))
    assert "ORC layout v6.4+ (by the entries' bits)" in out.stdout and "regs" in out.stdout


@pytest.mark.parametrize("name, ips, entries, header, words", [
    ("hash", ROWS, V3, "00" * 20, "an unknown layout hash"),
    ("sizes", ROWS, V3[:3], V3_HASH, "do not hold the same number of entries"),
    ("bits", ROWS, [(8, 0, 0x705)] * 3 + [(8, 0, 0x305)], None, "fit no ORC layout"),
])
def test_damaged_tables_are_one_problem_line(tmp_path, name, ips, entries, header, words):
    out = tables(build(tmp_path, name, ips, entries, header=header))
    assert "Traceback" not in out.stderr + out.stdout
    problems = [line for line in out.stdout.splitlines() if line.startswith("problem:") and words in line]
    assert len(problems) == 1, out.stdout + out.stderr
