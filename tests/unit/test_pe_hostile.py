"""Damaged PE files and unwind records: each a clear DecodeError (or a one-line refusal
from `python -m plugin tables`), in bounded time; a looping chain ends."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import pdata_eval
from plugin.formats import pdata_x64 as x64
from plugin.formats import pe


def _pe(machine=0x8664, magic=0x20B, nsections=1, opt_size=240, lfanew=0x80, exc=(0x1000, 12)):
    """A minimal PE32+ header with one section .pdata at RVA 0x1000 (file offset 0x200)."""
    dos = bytearray(0x80)
    dos[:2] = b"MZ"
    struct.pack_into("<I", dos, 0x3C, lfanew)
    coff = b"PE\0\0" + struct.pack("<HHIIIHH", machine, nsections, 0, 0, 0, opt_size, 0x22)
    opt = bytearray(max(opt_size, 240))
    struct.pack_into("<H", opt, 0, magic)
    struct.pack_into("<Q", opt, 24, 0x140000000)
    struct.pack_into("<I", opt, 56, 0x3000)
    struct.pack_into("<I", opt, 108, 16)
    struct.pack_into("<II", opt, 112 + 24, *exc)
    sect = struct.pack("<8sIIII", b".pdata", 0x1000, 0x1000, 0x200, 0x200) + bytes(16)
    data = bytes(dos) + coff + bytes(opt[:opt_size]) + sect * nsections
    return bytearray(data.ljust(0x200, b"\0") + bytes(0x200))


def test_a_good_header_reads():
    h = pe.read_headers(pe.file_reader(bytes(_pe())))
    assert (h.machine, h.exception_rva, h.exception_size) == (pe.Machine.AMD64, 0x1000, 12)
    assert [s.name for s in h.sections] == [".pdata"]


T, M, U, L = DecodeKind.TRUNCATED, DecodeKind.MALFORMED, DecodeKind.UNSUPPORTED, DecodeKind.LIMIT


@pytest.mark.parametrize("data,words,kind", [
    (b"", "truncated", T),
    (b"MZ" + bytes(10), "truncated", T),
    (b"ZM" + bytes(100), "no MZ", M),
    (bytes(_pe(lfanew=8)), "e_lfanew", M),
    (bytes(_pe(lfanew=0xFFFFFFF0)), "e_lfanew", M),
    (bytes(_pe())[:0x90], "truncated", T),
    (bytes(_pe(machine=0x14C)), "i386", U),
    (bytes(_pe(machine=0x1C4)), "not supported", U),
    (bytes(_pe(magic=0x10B)), "PE32+", U),
    (bytes(_pe(opt_size=16)), "too small", M),
    (bytes(_pe(nsections=5000)), "sections", L),
])
def test_bad_headers_are_one_clear_error(data, words, kind):
    with pytest.raises(DecodeError, match=words) as caught:
        pe.read_headers(pe.file_reader(data))
    assert caught.value.kind == kind


def test_no_pe_signature():
    data = _pe()
    data[0x80:0x84] = b"XX\0\0"
    with pytest.raises(DecodeError, match="no PE signature") as caught:
        pe.read_headers(pe.file_reader(bytes(data)))
    assert caught.value.kind == M


def test_rva_outside_sections_and_raw_data():
    data = bytes(_pe())
    h = pe.read_headers(pe.file_reader(data))
    read = pe.rva_reader(pe.file_reader(data), h, "file")
    with pytest.raises(DecodeError, match="in no section") as caught:
        read(0x5000, 4)
    assert caught.value.kind == M
    with pytest.raises(DecodeError, match="past the raw data") as caught:
        read(0x11FC, 8)
    assert caught.value.kind == T


def _reader(blob, at=0x2000):
    def read(rva, size):
        if not (at <= rva and rva + size <= at + len(blob)):
            raise DecodeError("test", None, "RVA 0x%x outside" % rva)
        return bytes(blob[rva - at:rva - at + size])
    return read


def test_looping_chain_is_bounded():
    # UNWIND_INFO at 0x2000, CHAININFO, no codes, chained RUNTIME_FUNCTION -> 0x2000 itself
    blob = bytes([0x21, 0, 0, 0]) + struct.pack("<III", 0x1000, 0x1010, 0x2000)
    with pytest.raises(DecodeError, match="loops") as caught:
        x64.chain(_reader(blob), x64.RuntimeFunction(0x1000, 0x1010, 0x2000))
    assert caught.value.kind == L


def test_long_chain_is_bounded():
    blob = b"".join(bytes([0x21, 0, 0, 0]) + struct.pack("<III", 0, 1, 0x2000 + 16 * (n + 1))
                    for n in range(100))
    with pytest.raises(DecodeError, match="deeper than") as caught:
        x64.chain(_reader(blob), x64.RuntimeFunction(0, 1, 0x2000))
    assert caught.value.kind == L


@pytest.mark.parametrize("codes,words,kind", [
    (bytes([0, 0x01]), "needs 2 slots", T),            # ALLOC_LARGE info 0 with no operand slot
    (bytes([0, 0x11, 0, 0]), "needs 3 slots", T),      # ALLOC_LARGE info 1 with one
    (bytes([0, 0x0B]), "unknown operation 11", U),
])
def test_bad_codes(codes, words, kind):
    with pytest.raises(DecodeError, match=words) as caught:
        x64.decode_codes(codes, len(codes) // 2, 1)
    assert caught.value.kind == kind


def test_bad_version_and_truncated_info():
    with pytest.raises(DecodeError, match="version 3") as caught:
        x64.read_unwind_info(_reader(bytes([3, 0, 0, 0])), 0x2000)
    assert caught.value.kind == U
    with pytest.raises(DecodeError, match="outside"):
        x64.read_unwind_info(_reader(bytes([1, 0, 4, 0])), 0x2000)   # 4 codes, none present


def test_push_machframe_reads_the_machine_frame():
    """With an error code: rsp+8 holds RIP, rsp+32 holds RSP (Microsoft's machine frame)."""
    stack = {0x1000 + 8: 0x401234, 0x1000 + 32: 0x7FF000}
    info = x64.UnwindInfo(0, 1, x64.Flag(0), 0, 0, 0,
                          (x64.UnwindCode(0, x64.Op.PUSH_MACHFRAME, 1, 0, 1),), None, None)
    frame = pdata_eval.unwind_x64(x64.RuntimeFunction(0, 4, 0), [info], 0x140000000,
                                  0x140000000, {n: 0 for n in x64.GPR} | {"rsp": 0x1000},
                                  lambda a, s: struct.pack("<Q", stack.get(a, 0)))
    assert (frame.rip, frame.cfa) == (0x401234, 0x7FF000)


@pytest.mark.parametrize("data,words", [(b"MZ" + bytes(30), "truncated"),
                                        (bytes(_pe(machine=0x14C)), "i386")])
def test_tables_command_refuses_in_one_line(tmp_path, data, words):
    path = tmp_path / "bad.exe"
    path.write_bytes(data)
    run = subprocess.run([sys.executable, "-m", "plugin", "tables", str(path)],
                         capture_output=True, text=True, timeout=60,
                         cwd=os.path.join(os.path.dirname(__file__), "..", ".."))
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and words in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("code,steps", [
    (b"\x48\x83\xc4\x28\x5b\x41\x5e\xc3", [("add", 0, 0x28), ("pop", 3, 0), ("pop", 14, 0)]),
    (b"\x48\x81\xc4\x00\x01\x00\x00\xc3", [("add", 0, 0x100)]),
    (b"\x48\x8d\x65\x10\x5d\xf3\xc3", [("lea", 5, 0x10), ("pop", 5, 0)]),
    (b"\x49\x8d\xa5\x00\x02\x00\x00\xc3", [("lea", 13, 0x200)]),
    (b"\x5e\xe9\x00\x10\x00\x00", [("pop", 6, 0)]),           # jmp out: a tail call
    (b"\x48\xff\x25\x00\x00\x00\x00", []),                     # jmp [rip+0]
])
def test_epilogues_are_read_from_the_code(code, steps):
    """Each form Microsoft lists for an x64 epilogue, read as the rest of it."""
    got = pdata_eval._epilogue(lambda a, n: code.ljust(n, b"\xcc")[:n], 0x1000,
                               [(0x1000, 0x1010)])
    assert got == steps + [("ret", 0, 0)]


@pytest.mark.parametrize("code", [
    b"\x48\x83\xc4\x28\x90\xc3",      # add rsp, then a nop: not an epilogue
    b"\xeb\x02",                      # jmp inside the function
    b"\x48\x83\xec\x28\xc3",          # sub rsp is a prologue's
    b"\x5b\x5b\x48\x89\xc8\xc3",      # pops then a mov
])
def test_code_that_is_no_epilogue(code):
    assert pdata_eval._epilogue(lambda a, n: code.ljust(n, b"\xcc")[:n], 0x1000,
                                [(0x1000, 0x1010)]) is None


def test_arm64_opcodes_split_by_their_documented_lengths():
    """Microsoft's table: the first byte gives each opcode's length, reserved ones too;
    a code cut short is an error, and splitting stops at end."""
    from plugin.formats import pdata_arm64 as a64
    codes = bytes([0xE0, 0, 1, 0, 0xC8, 0x02, 0xFA, 1, 2, 3, 0xE2, 4, 0xE4, 0x01])
    ops = a64.opcodes(codes)
    assert [(op.name, op.raw.hex()) for op in ops] == [
        ("alloc_l", "e0000100"), ("save_regp", "c802"), ("reserved", "fa010203"),
        ("add_fp", "e204"), ("end", "e4")]
    assert [a64.operand(op) for op in ops] == [256 * 16, 16, 0, 32, 0]
    assert a64.register(ops[1]) == "x19"
    with pytest.raises(DecodeError, match="needs 4 bytes") as caught:
        a64.opcodes(bytes([0xE0, 0]))
    assert caught.value.kind == T


PE_DECODERS = ("pe.py", "pdata_x64.py", "pdata_eval.py", "pdata_arm64.py", "pdata_arm64_eval.py",
               "pdata_arm64_packed.py")


def test_every_pe_decode_error_has_a_kind():
    """Every DecodeError the PE and pdata decoders build names its DecodeKind (issue 32 item 5),
    or passes on the one its helper was given (`kind`): read from their source, so a new raise
    without one fails here."""
    import ast

    import plugin.formats
    folder = os.path.dirname(plugin.formats.__file__)
    built = 0
    for name in PE_DECODERS:
        tree = ast.parse(open(os.path.join(folder, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("DecodeError", "_fail"):
                wanted = 4 if node.func.id == "DecodeError" else 2
                kinds = node.args[wanted - 1:] + [k.value for k in node.keywords if k.arg == "kind"]
                said = ast.unparse(kinds[0]) if len(kinds) == 1 else ""
                assert said.startswith("DecodeKind.") or said == "kind", \
                    "%s:%d: %s" % (name, node.lineno, ast.unparse(node))
                built += 1
    assert built >= 30
