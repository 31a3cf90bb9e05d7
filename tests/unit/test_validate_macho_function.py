"""`validate FILE --function NAME` finds a Mach-O function by its C name or its '_' symbol, where llvm-nm puts it."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

_C = "double cw_floats(double a, double b) { return a * b + 1.5; }\nint other(int x) { return x * 3 + 1; }\n"


@pytest.fixture(scope="module")
def dylib(tmp_path_factory):
    d = tmp_path_factory.mktemp("macho")
    (d / "cw.c").write_text(_C)
    subprocess.run(["clang-16", "-target", "x86_64-apple-macos11", "-O2", "-c", str(d / "cw.c"),
                    "-o", str(d / "cw.o")], check=True)
    subprocess.run(["ld64.lld-16", "-dylib", "-arch", "x86_64", "-platform_version", "macos", "11.0", "11.0",
                    str(d / "cw.o"), "-o", str(d / "cw.dylib")], check=True)
    return str(d / "cw.dylib")


def _validate(path, name):
    return subprocess.run([sys.executable, "-m", "plugin", "validate", path, "--function", name],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["cw_floats", "_cw_floats"])
def test_found_where_nm_puts_it(dylib, name):
    nm = subprocess.run(["llvm-nm-16", dylib], capture_output=True, text=True, check=True).stdout
    address = int(re.search(r"^([0-9a-f]+) T _cw_floats$", nm, re.M).group(1), 16)
    done = _validate(dylib, name)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^cw_floats \[0x%x, " % address, done.stdout, re.M)
    assert "other [" not in done.stdout


def test_unknown_name_is_an_argument_error(dylib):
    done = _validate(dylib, "no_such_function")
    assert done.returncode == 2 and "no function named" in done.stderr
