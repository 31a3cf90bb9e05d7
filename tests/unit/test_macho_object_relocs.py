"""arm64 Mach-O objects: __eh_frame pc_begin relocations (SUBTRACTOR/UNSIGNED pairs) are applied,
so FDEs start where llvm-nm puts the functions (llvm-dwarfdump leaves them at __eh_frame's address)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from plugin.file_targets.macho_relocs import relocate_eh_frame

_C = ("extern int g(int);\nint f1(int x) { return g(x) * 7 + x; }\n"
      "int f2(int a, int b) { return g(a) + g(b) * b + a; }\n")


@pytest.mark.parametrize("target", ["arm64", "x86_64"])
def test_fde_starts_are_the_functions(tmp_path, target):
    """arm64: pc_begin carries a relocation pair; x86_64: the assembler resolved it (none to apply)."""
    (tmp_path / "obj.c").write_text(_C)
    obj = str(tmp_path / "obj.o")
    subprocess.run(["clang-16", "-target", target + "-apple-macos11", "-O2", "-fomit-frame-pointer",
                    "-femit-dwarf-unwind=always", "-c", str(tmp_path / "obj.c"), "-o", obj], check=True)
    relocs = subprocess.run(["llvm-objdump-16", "-r", obj], capture_output=True, text=True, check=True).stdout
    assert ("ARM64_RELOC_SUBTRACTOR" in relocs) == (target == "arm64")
    nm = subprocess.run(["llvm-nm-16", obj], capture_output=True, text=True, check=True).stdout
    starts = sorted(int(a, 16) for a in re.findall(r"^([0-9a-f]+) T _f[12]$", nm, re.M))
    done = subprocess.run([sys.executable, "-m", "plugin", "tables", obj], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    fdes = [int(a, 16) for a in re.findall(r"^  \[0x([0-9a-f]+), 0x[0-9a-f]+\) FDE", done.stdout, re.M)]
    assert len(starts) == 2 and sorted(fdes) == starts


def test_truncated_object_says_so():
    header = bytes.fromhex("cffaedfe0c000001000000000100000004000000")
    data, problems = relocate_eh_frame(header + b"\0" * 8)
    assert data == header + b"\0" * 8 and problems and "unrelocated" in problems[0]


def test_unapplied_relocations_are_a_problem_and_status_2(tmp_path):
    """A truncated arm64 object whose relocation table is cut: tables and validate say the ranges
    are unrelocated; validate exits 2 (a bad file), never with a traceback."""
    (tmp_path / "obj.c").write_text(_C)
    obj = tmp_path / "obj.o"
    subprocess.run(["clang-16", "-target", "arm64-apple-macos11", "-O2", "-fomit-frame-pointer", "-c",
                    str(tmp_path / "obj.c"), "-o", str(obj)], check=True)
    cut = tmp_path / "cut.o"
    cut.write_bytes(obj.read_bytes()[:900])
    for command, status in (("tables", 1), ("validate", 2)):
        done = subprocess.run([sys.executable, "-m", "plugin", command, str(cut)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == status and "Traceback" not in done.stderr
        assert "FDE ranges are unrelocated" in done.stdout + done.stderr
