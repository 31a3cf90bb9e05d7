"""PE images found in a process's memory (plugin.modules.pe): a clang-built DLL laid out
at its ImageBase in a snapshot is found by scan_mappings from its headers, with the
sections llvm-objdump-16 lists (executable where it says TEXT) and its exception
directory; damaged or foreign headers at a mapping's start give no module and no
exception; the pdata source says "not a PE image" for other modules."""
from __future__ import annotations

import random
import re
import subprocess

from pe_images import build

from plugin.arch import by_name
from plugin.formats import pe as pe_format
from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus
from plugin.modules import discover
from plugin.modules import pe as pe_modules
from plugin.target import Mapping, ModuleRef, SnapshotTarget


def _laid_out(path):
    """(image base, the image as the loader lays it out) of a PE file."""
    data = open(path, "rb").read()
    headers = pe_format.read_headers(pe_format.file_reader(data))
    image = bytearray(headers.size_of_image)
    image[:0x400] = data[:0x400]
    for s in headers.sections:
        n = min(s.raw_size, s.virtual_size or s.raw_size)
        image[s.virtual_address:s.virtual_address + n] = data[s.raw_offset:s.raw_offset + n]
    return headers.image_base, bytes(image)


def _target(base, image, name=""):
    return SnapshotTarget(by_name("x86_64"), regions=[(base, image), (0x10000, bytes(0x1000))],
                          mapping_list=[Mapping(0x10000, 0x11000, name="[stack]"),
                                        Mapping(base, base + len(image), name=name)])


def test_a_dll_in_memory_is_found_by_its_headers(tmp_path):
    path = build("x64_live.c", str(tmp_path), dll=True)
    base, image = _laid_out(path)
    target = _target(base, image)
    refs = pe_modules.scan_mappings(target, target.mappings())
    assert refs == [ModuleRef("PE image at 0x%x" % base, base, None)]
    module = discover(target, refs[0])
    assert (module.format, module.arch.name, module.load_bias) == ("pe", "x86_64", 0)
    out = subprocess.run(["llvm-objdump-16", "-h", path], check=True, capture_output=True, text=True).stdout
    sections = re.findall(r"^\s*\d+ (\S+)\s+([0-9a-f]+) ([0-9a-f]+) ?(\S*)", out, re.M)
    assert sections
    for name, size, vma, kind in sections:
        start = int(vma, 16)
        if int(size, 16):
            assert module.contains(start) and module.is_executable(start) == (kind == "TEXT"), name
    headers = pe_format.read_headers(pe_format.file_reader(open(path, "rb").read()))
    table = module.tables[".pdata"]
    assert (table.address, table.size) == (base + headers.exception_rva, headers.exception_size)


def test_damaged_headers_give_no_module(tmp_path):
    base, image = _laid_out(build("x64_live.c", str(tmp_path), dll=True))
    rng = random.Random(44)
    found = 0
    for _ in range(200):
        damaged = bytearray(image)
        for _ in range(6):
            damaged[rng.randrange(0x200)] = rng.randrange(256)
        target = _target(base, bytes(damaged))
        refs = pe_modules.scan_mappings(target, target.mappings())       # never raises
        found += len(refs)
        for ref in refs:
            discover(target, ref)
    assert 0 < found < 200
    i386 = bytearray(image)
    lfanew = int.from_bytes(image[0x3C:0x40], "little")
    i386[lfanew + 4:lfanew + 6] = (0x14C).to_bytes(2, "little")
    assert pe_modules.scan_mappings(_target(base, bytes(i386)), _target(base, bytes(i386)).mappings()) == []


def test_the_pdata_source_is_pe_only(tmp_path):
    from plugin.engine import UnwindContext
    from plugin.strategies import pdata
    base, image = _laid_out(build("x64_live.c", str(tmp_path), dll=True))
    target = _target(base, image)
    target.module_refs = pe_modules.scan_mappings(target, target.mappings())
    ctx = UnwindContext(target)
    arch = target.arch
    outside = Frame(level=0, pc=0x10010, registers={arch.pc: 0x10010, arch.sp: 0x10800}, method="context",
                    exact_pc=True)
    assert pdata.step(outside, ctx).status == AttemptStatus.NOT_APPLICABLE
    header = Frame(level=0, pc=base + 0x10, registers={arch.pc: base + 0x10, arch.sp: 0x10800},
                   method="context", exact_pc=True)
    outcome = pdata.step(header, ctx)
    assert outcome.status == AttemptStatus.NOT_APPLICABLE and "no .pdata entry" in outcome.reason
