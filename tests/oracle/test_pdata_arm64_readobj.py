"""ARM64 .pdata/.xdata decoded by plugin.formats.pdata_arm64 equal llvm-readobj-16 --unwind's
entries field by field: packed entries (clang -O0), Flag=2 fragments (hand-written .pdata),
unpacked records with a packed epilogue (clang -O2) or epilogue scopes (hand-written .seh_*),
every opcode's bytes and every scope's offset and start index."""
from __future__ import annotations

import pytest

from pe_images import build, readobj_arm64

from plugin.formats import pdata_arm64 as arm64
from plugin.formats import pe

ARM64 = "aarch64-pc-windows-msvc"
IMAGES = [("x64_funcs.c", "-O0", False), ("x64_funcs.c", "-O2", False),
          ("x64_funcs.c", "-O2", True), ("arm64_codes.s", "-O0", False)]
YES = {True: "Yes", False: "No"}


def _decode(path):
    data = open(path, "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    read = pe.rva_reader(pe.file_reader(data), headers, "file")
    return headers, read, arm64.read_entries(read, headers.exception_rva, headers.exception_size)


@pytest.mark.parametrize("source,opt,dll", IMAGES)
def test_every_field_equals_llvm_readobj(tmp_path, source, opt, dll):
    path = build(source, str(tmp_path), target=ARM64, opt=opt, dll=dll)
    headers, read, entries = _decode(path)
    theirs = readobj_arm64(path)
    assert headers.machine == pe.Machine.ARM64
    assert len(entries) == len(theirs) > 0
    base = headers.image_base
    for entry, want in zip(entries, theirs):
        assert base + entry.begin == want["Function"]
        if entry.packed is not None:
            p = entry.packed
            assert (YES[entry.flag == arm64.PdataFlag.FRAGMENT], str(p.function_length),
                    str(p.reg_f), str(p.reg_i), YES[p.homed], str(int(p.cr)),
                    str(p.frame_size)) == \
                (want["Fragment"], want["FunctionLength"], want["RegF"], want["RegI"],
                 want["HomedParameters"], want["CR"], want["FrameSize"])
            continue
        assert base + entry.xdata == want["ExceptionRecord"]
        x = arm64.read_xdata(read, entry.xdata)
        assert (str(x.function_length), str(x.version), YES[x.has_exception_data],
                YES[x.epilogue_packed], str(len(x.codes))) == \
            (want["FunctionLength"], want["Version"], want["ExceptionData"],
             want["EpiloguePacked"], want["ByteCodeLength"])
        if x.epilogue_packed:
            assert str(x.epilogue_count) == want["EpilogueOffset"]
        else:
            assert str(x.epilogue_count) == want["EpilogueScopes"]
        assert [op.raw.hex() for op in arm64.opcodes(x.codes)] == want["prologue"]
        got_scopes = [[s.offset // 4, s.start_index,
                       [op.raw.hex() for op in arm64.opcodes(x.codes, s.start_index)]]
                      for s in x.scopes]
        assert got_scopes == want["scopes"]


def test_the_fixtures_cover_each_kind(tmp_path):
    kinds, names = set(), set()
    for source, opt, dll in IMAGES:
        _, read, entries = _decode(build(source, str(tmp_path), target=ARM64, opt=opt, dll=dll))
        for e in entries:
            kinds.add(e.flag)
            if e.xdata is not None:
                x = arm64.read_xdata(read, e.xdata)
                kinds.add("scopes" if x.scopes else "packed epilogue")
                names |= {op.name for op in arm64.opcodes(x.codes)}
    assert {arm64.PdataFlag.PACKED, arm64.PdataFlag.FRAGMENT, arm64.PdataFlag.XDATA,
            "scopes", "packed epilogue"} <= kinds
    assert {"save_fplr", "save_fplr_x", "save_regp", "save_freg", "set_fp", "alloc_s",
            "save_reg", "end"} <= names


@pytest.mark.parametrize("target", [ARM64, "x86_64-pc-windows-msvc"])
def test_tables_command_prints_every_entry(tmp_path, target):
    """`python -m plugin tables FILE` on a PE file: exit 0, one RuntimeFunction line per
    entry llvm-readobj lists, at the same addresses."""
    import re
    import subprocess
    import sys
    path = build("x64_funcs.c", str(tmp_path), target=target, opt="-O0")
    import os
    run = subprocess.run([sys.executable, "-m", "plugin", "tables", path],
                         capture_output=True, text=True, timeout=120,
                         cwd=os.path.join(os.path.dirname(__file__), "..", ".."))
    assert run.returncode == 0, run.stderr
    ours = [int(a, 16) for a in re.findall(r"^RuntimeFunction 0x([0-9a-f]+)", run.stdout, re.M)]
    readobj = subprocess.run(["llvm-readobj-16", "--unwind", path], capture_output=True,
                             text=True, check=True).stdout
    theirs = [int(a, 16) for a in
              re.findall(r"(?:Function|StartAddress): .*?\(?0x([0-9A-F]+)\)?$", readobj, re.M)]
    assert ours == theirs and ours


@pytest.mark.parametrize("target", [ARM64, "x86_64-pc-windows-msvc"])
def test_damaged_images_give_decode_errors_only(tmp_path, target):
    """300 copies of a clang-built image, each with 8 random bytes of its headers, .pdata or
    .xdata overwritten: `tables` prints or raises DecodeError, nothing else."""
    import io
    import random
    from plugin.errors import DecodeError
    from plugin.render import pe_tables
    data = open(build("x64_funcs.c", str(tmp_path), target=target, opt="-O0"), "rb").read()
    headers = pe.read_headers(pe.file_reader(data))
    spots = list(range(0, 0x200)) + [s.raw_offset + k for s in headers.sections
                                     if s.name in (".pdata", ".xdata", ".rdata")
                                     for k in range(min(s.raw_size, 0x100))]
    rng = random.Random(36)
    outcomes = {"printed": 0, "refused": 0}
    for n in range(300):
        damaged = bytearray(data)
        for _ in range(8):
            damaged[rng.choice(spots)] = rng.randrange(256)
        path = tmp_path / ("d%d.exe" % n)
        path.write_bytes(bytes(damaged))
        try:
            pe_tables.write_text(str(path), io.StringIO())
            outcomes["printed"] += 1
        except DecodeError:
            outcomes["refused"] += 1
    assert outcomes["printed"] and outcomes["refused"]
