"""plugin.formats.elf and ELF module discovery checked against readelf (binutils).

readelf's program-header table, entry point, and GNU build-id note are the
oracle; the files are system binaries and fixtures built here (PIE, static,
without .eh_frame_hdr).
"""

import re

import pytest

from plugin.formats import elf
from plugin.modules import ModuleMap
from plugin.file_targets.elf import FileTarget
from support import build, need_tool, run, system_library

BASE = 0x7F1234560000


def _files():
    return [
        ("ls", lambda: "/usr/bin/ls"),
        ("libc", lambda: str(system_library("libc.so.6"))),
        ("chain-pie", lambda: str(build("chain.c", ["-O2"]))),
        ("chain-static", lambda: str(build("chain.c", ["-O2", "-static"], name="chain-static"))),
        ("chain-nohdr", lambda: str(build("chain.c", ["-O1", "-Wl,--no-eh-frame-hdr"], name="chain-nohdr"))),
    ]


def _readelf(path):
    need_tool("readelf")
    text = run(["readelf", "-lhnW", path]).stdout
    entry = int(re.search(r"Entry point address:\s+(0x[0-9a-f]+)", text).group(1), 16)
    phnum = int(re.search(r"Number of program headers:\s+(\d+)", text).group(1))
    rows = []
    for m in re.finditer(r"^\s+([A-Z_]+)\s+(0x[0-9a-f]+) (0x[0-9a-f]+) 0x[0-9a-f]+ (0x[0-9a-f]+) "
                         r"(0x[0-9a-f]+) ([RWE ]{3})", text, re.M):
        kind, offset, vaddr, filesz, memsz, flags = m.groups()
        rows.append((kind, int(offset, 16), int(vaddr, 16), int(filesz, 16), int(memsz, 16),
                     "E" in flags))
    ids = re.findall(r"Build ID: ([0-9a-f]+)", text)
    return entry, phnum, rows, ids


@pytest.mark.parametrize("name,path", _files(), ids=[n for n, _ in _files()])
def test_headers_match_readelf(name, path):
    path = path()
    entry, phnum, rows, ids = _readelf(path)
    data = open(path, "rb").read()
    header = elf.parse_header(data[:elf.HEADER_SIZE])
    assert (header.entry, header.phnum) == (entry, phnum)
    phdrs = elf.parse_program_headers(data[header.phoff:], header)
    assert len(phdrs) == len(rows) == phnum
    for ours, theirs in zip(phdrs, rows):
        assert (ours.offset, ours.vaddr, ours.filesz, ours.memsz, ours.executable) == theirs[1:]
        assert (ours.type == elf.PT_LOAD) == (theirs[0] == "LOAD")
        assert (ours.type == elf.PT_GNU_EH_FRAME) == (theirs[0] == "GNU_EH_FRAME")
    loads = [p for p in phdrs if p.type == elf.PT_LOAD]
    # readelf: the header is mapped by the LOAD whose file offset is 0.
    assert elf.header_link_address(loads) == min(r[2] for r in rows if r[0] == "LOAD" and r[1] == 0)
    notes = [elf.build_id(data[p.offset:p.offset + p.filesz], header.order)
             for p in phdrs if p.type == elf.PT_NOTE]
    assert [n for n in notes if n] == ids and ids


@pytest.mark.parametrize("name,path", _files(), ids=[n for n, _ in _files()])
def test_module_discovered_from_memory_matches_readelf(name, path):
    """A file laid out at BASE: discovery from its in-memory headers gives
    readelf's segments moved by the load bias, and readelf's build id."""
    path = path()
    _, _, rows, ids = _readelf(path)
    target = FileTarget(path, base=BASE)
    module = ModuleMap(target).all()[0]
    link = min(r[2] for r in rows if r[0] == "LOAD" and r[1] == 0)
    assert module.header_address == BASE and module.load_bias == BASE - link
    loads = sorted(r for r in rows if r[0] == "LOAD")
    assert [(s.start, s.end, s.executable) for s in module.segments] == \
        sorted((module.load_bias + r[2], module.load_bias + r[2] + r[4], r[5]) for r in loads)
    assert module.build_id == (ids[0] if ids else None)
    hdr = [r for r in rows if r[0] == "GNU_EH_FRAME"]
    assert (".eh_frame_hdr" in module.tables) == bool(hdr)
    if hdr:
        assert module.tables[".eh_frame_hdr"].address == module.load_bias + hdr[0][2]


def test_eh_frame_without_header_is_found_by_section_headers():
    """No .eh_frame_hdr: `unwind modules` reports .eh_frame where readelf's
    section headers put it (moved by the bias), found on disk, and the
    Module itself is not rewritten by the CFI source."""
    path = str(build("chain.c", ["-O1", "-Wl,--no-eh-frame-hdr"], name="chain-nohdr"))
    text = run(["readelf", "-SW", path]).stdout
    address, size = (int(x, 16) for x in
                     re.search(r"\] \.eh_frame\s+PROGBITS\s+([0-9a-f]+) [0-9a-f]+ ([0-9a-f]+)", text).groups())
    from plugin.commands.reports import modules_report
    modules = ModuleMap(FileTarget(path, base=BASE))
    module = modules.all()[0]
    before = dict(module.tables)
    data, lines = modules_report(modules)
    found = data["modules"][0]["tables"][".eh_frame"]
    assert (found["address"], found["size"]) == (module.load_bias + address, size)
    assert found["found_by"] == "section headers of %s (no .eh_frame_hdr)" % path
    assert module.tables == before and ".eh_frame" not in module.tables
