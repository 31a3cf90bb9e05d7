"""One error taxonomy (issue 32 item 5): every DecodeError the core builds says its kind.

The scan reads every module of plugin/ (all of them, not a list) and fails on a
`DecodeError(...)` call, raised or returned by a helper, that passes no kind (a fourth
argument or kind=); the kind must be a DecodeKind member or a name forwarded from the
caller. Then a few decoders are fed bad bytes and must report the kind the scan cannot
judge: the right one.
"""

from __future__ import annotations

import ast
import pathlib
import struct
import zlib

import pytest

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import compressed, elf, macho
from plugin.formats.compact_unwind import UnwindInfo
from plugin.memory import Region

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "plugin").rglob("*.py"))


def kindless(path: pathlib.Path) -> list:
    """Lines of `path` that build a DecodeError without a kind, or with a literal kind."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "DecodeError":
            continue
        kinds = [k.value for k in node.keywords if k.arg == "kind"] + node.args[3:4]
        if not kinds:
            bad.append(node.lineno)
            continue
        kind = kinds[0]
        named = isinstance(kind, ast.Name) or (isinstance(kind, ast.Attribute) and kind.attr != "value")
        if not named:
            bad.append(node.lineno)
    return bad


def test_the_scan_sees_the_package():
    names = {p.relative_to(ROOT).as_posix() for p in MODULES}
    assert len(MODULES) > 100
    assert {"plugin/formats/macho.py", "plugin/formats/elf.py", "plugin/formats/compact_unwind.py",
            "plugin/formats/pe.py", "plugin/formats/orc.py"} <= names
    assert kindless(ROOT / "plugin/errors.py") == []


def test_the_scan_finds_a_kindless_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(e):\n"
                      "    raise DecodeError('s', 0, 'cause')\n"
                      "def g(kind):\n"
                      "    raise DecodeError('s', 0, 'cause', kind)\n"
                      "def h():\n"
                      "    return DecodeError('s', 0, 'cause', kind=DecodeKind.LIMIT)\n"
                      "def i():\n"
                      "    return DecodeError('s', 0, 'cause', 'limit')\n")
    assert kindless(sample) == [2, 8]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_decode_error_has_a_kind(path):
    assert kindless(path) == [], "DecodeError without a DecodeKind at lines %s" % kindless(path)


def raised(call, *args) -> DecodeKind:
    with pytest.raises(DecodeError) as err:
        call(*args)
    return err.value.kind


def macho_header(ncmds: int, sizeofcmds: int) -> bytes:
    return struct.pack("<7I", macho.MH_MAGIC, 7, 3, 2, ncmds, sizeofcmds, 0)


def test_macho_kinds():
    def image(data):
        return macho.MachO(Region.from_bytes("image", 0, data))
    assert raised(image, b"\0" * 28) == DecodeKind.MALFORMED                    # no magic
    assert raised(image, macho_header(1, 0x100)) == DecodeKind.TRUNCATED        # commands past the end
    assert raised(image, macho_header(1, 8) + struct.pack("<2I", 0x1b, 4)) == DecodeKind.MALFORMED
    fat = struct.pack(">2I", macho.FAT_MAGIC, 1) + struct.pack(">5I", 7, 3, 0x100, 0x100, 0)
    region = Region.from_bytes("fat", 0, fat)
    assert raised(macho.fat_slices, region) == DecodeKind.TRUNCATED             # slice past the end
    many = Region.from_bytes("fat", 0, struct.pack(">2I", macho.FAT_MAGIC, 10 ** 6))
    assert raised(macho.fat_slices, many) == DecodeKind.LIMIT


def test_elf_kinds():
    assert raised(elf.parse_header, b"\0" * 64) == DecodeKind.MALFORMED
    assert raised(elf.header_link_address, []) == DecodeKind.ABSENT


def test_compressed_kinds():
    assert raised(compressed.shf_compressed, ".debug_frame", b"\1\0", True, True) == DecodeKind.TRUNCATED
    header = struct.pack("<IIQQ", 9, 0, 16, 1)
    assert raised(compressed.shf_compressed, ".debug_frame", header, True, True) == DecodeKind.UNSUPPORTED
    big = struct.pack("<IIQQ", 1, 0, 1 << 40, 1) + zlib.compress(b"x")
    assert raised(compressed.shf_compressed, ".debug_frame", big, True, True) == DecodeKind.LIMIT


def test_compact_unwind_kinds():
    def info(data):
        return UnwindInfo(Region.from_bytes("__unwind_info", 0, data), None, 0)
    assert raised(info, struct.pack("<7I", 2, 28, 0, 28, 0, 28, 0)) == DecodeKind.UNSUPPORTED
    assert raised(info, struct.pack("<7I", 1, 28, 50, 28, 0, 28, 0)) == DecodeKind.TRUNCATED
