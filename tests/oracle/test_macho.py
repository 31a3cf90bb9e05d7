"""Mach-O parsing (plugin/formats/macho.py).

Oracle: `llvm-objdump-16 --macho --private-headers --non-verbose` (header,
segments, sections, LC_UUID) and `--universal-headers` (fat slices), run
here on every Mach-O of the corpus and on files built at test time. Also:
an image laid out in memory the way dyld maps it, at a slide, must give the
same sections and unwind table; and bad input gives DecodeError only.
"""

import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import need_tool, oracle_dir, run
from compact_support import (LLVM_INPUTS, MACHO_FILES, build_macho, file_region, images, private_headers,
                             unwind_info_of)

from plugin.errors import DecodeError
from plugin.formats import compact_unwind as cu
from plugin.formats.macho import (CPU_TYPE_ARM64, CPU_TYPE_X86_64, MachO, fat_slices,
                                  open_image, open_slice)
from plugin.memory import Region

EXTRA_CORPUS = [
    LLVM_INPUTS + "compact-unwind.macho-x86_64",      # object files: no __TEXT segment name
    LLVM_INPUTS + "compact-unwind.macho-i386",
    LLVM_INPUTS + "eh_frame.macho-arm64",
    LLVM_INPUTS + "hello.obj.macho-x86_64",
]


def assert_like_llvm(macho, expected):
    assert macho.cputype == expected["cputype"]
    assert macho.cpusubtype & 0x00FFFFFF == expected["cpusubtype"]
    assert macho.filetype == expected["filetype"]
    assert macho.uuid == expected["uuid"]
    assert [(s.name, s.vmaddr, s.vmsize, s.fileoff, s.filesize, len(s.sections))
            for s in macho.segments] == [
        (s["segname"], s["vmaddr"], s["vmsize"], s["fileoff"], s["filesize"], s["nsects"])
        for s in expected["segments"]]
    assert [(s.segname, s.sectname, s.addr, s.size, s.offset) for s in macho.sections] == [
        (s["segname"], s["sectname"], s["addr"], s["size"], s["offset"])
        for s in expected["sections"]]


def _name(path):
    return path.split("/")[-1]


@pytest.mark.parametrize("path", MACHO_FILES + EXTRA_CORPUS, ids=_name)
def test_corpus_headers_match_llvm_objdump(path, tmp_path):
    full = oracle_dir() / path
    region = file_region(full)
    slices = fat_slices(region)
    if not slices:
        assert_like_llvm(MachO(region), private_headers(full))
        return
    for n, fat_slice in enumerate(slices):
        thin = tmp_path / ("slice%d" % n)
        thin.write_bytes(region.read(fat_slice.offset, fat_slice.size))
        assert_like_llvm(open_slice(region, fat_slice), private_headers(thin))


def test_arch_base_and_key_sections():
    root = oracle_dir()
    cases = {
        "framehop/fixtures/macos/x86_64/nofp/firefox-esr-78": ("x86_64", 0x100000000, True),
        "framehop/fixtures/macos/x86_64/fp/libmozglue.dylib": ("x86_64", 0, True),
        "framehop/fixtures/macos/arm64/fp/query-api": ("aarch64", 0x100000000, True),
        LLVM_INPUTS + "compact-unwind.macho-i386": ("i386", 0, False),
    }
    for path, (arch, base, has_unwind) in cases.items():
        macho = images(root / path)[0]
        assert macho.arch.name == arch
        assert macho.text_vmaddr == base and macho.slide == 0 and macho.image_base == base
        assert (macho.section("__TEXT", "__unwind_info") is not None) == has_unwind
        assert macho.section("__TEXT", "__text") is not None
    query = images(root / "framehop/fixtures/macos/arm64/fp/query-api")[0]
    assert query.is_64 and query.section("__TEXT", "__eh_frame") is not None
    assert query.section("__TEXT", "__nothing") is None


def test_fat_slices_match_llvm_universal_headers():
    path = oracle_dir() / "framehop/fixtures/macos/arm64/fp/libmozglue-fat.dylib"
    tool = need_tool("llvm-objdump-16")
    result = run([tool, "--macho", "--universal-headers", "--non-verbose", str(path)])
    expected = [(int(c), int(s), int(o), int(z)) for c, s, o, z in re.findall(
        r"cputype (\d+)\n\s+cpusubtype (\d+)\n.*\n\s+offset (\d+)\n\s+size (\d+)", result.stdout)]
    region = file_region(path)
    slices = fat_slices(region)
    assert [(s.cputype, s.cpusubtype & 0x00FFFFFF, s.offset, s.size) for s in slices] == expected
    assert [s.cputype for s in slices] == [CPU_TYPE_X86_64, CPU_TYPE_ARM64]
    arm = open_image(region, cputype=CPU_TYPE_ARM64)
    assert arm.arch.name == "aarch64"
    assert open_image(region).arch.name == "x86_64"
    with pytest.raises(DecodeError, match="no slice"):
        open_image(region, cputype=7)
    assert fat_slices(file_region(oracle_dir() / "framehop/fixtures/macos/arm64/fp/query-api")) == []


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_built_files_match_llvm_objdump(arch):
    path, _ = build_macho("unwind_shapes.c", arch, ["-O2"])
    macho = images(path)[0]
    assert_like_llvm(macho, private_headers(path))
    assert macho.filetype == 6 and macho.uuid is not None


def _load(path, load_address):
    """The image as dyld would map it: each segment's file bytes at
    load_address + (vmaddr - text vmaddr), zero-filled to vmsize."""
    macho = images(path)[0]
    size = max(s.vmaddr + s.vmsize for s in macho.segments if s.vmsize) - macho.text_vmaddr
    memory = bytearray(size)
    for seg in macho.segments:
        if seg.vmsize == 0 or seg.vmaddr < macho.text_vmaddr:
            continue                  # __PAGEZERO is not part of the image
        start = seg.vmaddr - macho.text_vmaddr
        memory[start:start + seg.filesize] = macho.region.read(seg.fileoff, seg.filesize)
    reads = []

    def fetch(address, n):
        reads.append((address, n))
        offset = address - load_address
        return bytes(memory[offset:offset + n])

    return macho, Region("image@0x%x" % load_address, load_address, size, fetch), reads


@pytest.mark.parametrize("path", ["framehop/fixtures/macos/x86_64/nofp/firefox-esr-78",
                                  "framehop/fixtures/macos/x86_64/nofp/libmozglue.dylib"],
                         ids=_name)
def test_mapped_image_at_a_slide(path):
    load_address = 0x7FFF12340000
    on_disk, region, reads = _load(oracle_dir() / path, load_address)
    mapped = MachO(region, load_address=load_address, mapped=True)
    assert mapped.slide == load_address - on_disk.text_vmaddr
    assert mapped.image_base == load_address
    assert mapped.sections == on_disk.sections and mapped.uuid == on_disk.uuid
    in_memory = unwind_info_of(mapped)
    from_file = unwind_info_of(on_disk)
    slide = mapped.slide
    assert [(s + slide, e + slide, enc) for s, e, enc in from_file.entries()] == in_memory.entries()
    # STACK_IND reads its immediate from the mapped code
    for start, _, encoding in in_memory.entries():
        decoded = cu.decode_encoding(encoding, mapped.arch)
        if decoded.mode == "STACK_IND":
            row = cu.to_row(decoded, start, mapped.arch, mapped.read_code)
            file_row = cu.to_row(decoded, start - slide, on_disk.arch, on_disk.read_code)
            assert row.cfa == file_row.cfa
    assert all(load_address <= a and a + n <= load_address + region.size for a, n in reads)


def test_read_code_is_bounded_by_text():
    macho = images(oracle_dir() / "framehop/fixtures/macos/x86_64/nofp/firefox-esr-78")[0]
    text = macho.section("__TEXT", "__text")
    assert len(macho.read_code(text.addr, 4)) == 4
    with pytest.raises(DecodeError):
        macho.read_code(text.addr + text.size - 2, 4)
    with pytest.raises(DecodeError):
        macho.read_code(text.addr - 1, 1)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

def _header(ncmds, sizeofcmds, magic=0xFEEDFACF, cputype=CPU_TYPE_X86_64):
    return struct.pack("<8I", magic, cputype, 3, 2, ncmds, sizeofcmds, 0, 0)


def _segment(name, nsects, cmdsize=None):
    size = 72 + 80 * nsects if cmdsize is None else cmdsize
    return struct.pack("<2I16s4Q4I", 0x19, size, name, 0x1000, 0x1000, 0, 0x1000, 5, 5, nsects, 0)


def _macho(data):
    return MachO(Region.from_bytes("bad", 0, data))


def test_minimal_images():
    seg = _segment(b"__TEXT", 0)
    uuid = struct.pack("<2I", 0x1B, 24) + bytes(range(16))
    macho = _macho(_header(2, len(seg) + 24) + seg + uuid)
    assert macho.text_vmaddr == 0x1000 and macho.uuid == bytes(range(16))
    big = struct.pack(">8I", 0xFEEDFACE, 18, 0, 2, 0, 0, 0, 0)[:28]    # 32-bit big-endian
    macho = _macho(big)
    assert macho.byteorder == "big" and not macho.is_64 and macho.arch is None


@pytest.mark.parametrize("data,message", [
    (b"", "past the end"),
    (b"\x7fELF" + bytes(60), "not a Mach-O"),
    (_header(1, 1000), "run past the end"),
    (_header(1, 8) + struct.pack("<2I", 0x19, 4), "bad size"),
    (_header(1, 8) + struct.pack("<2I", 0x19, 16), "bad size"),
    (_header(2, 8) + struct.pack("<2I", 0x2, 8), "starts past sizeofcmds"),
    (_header(1, 72) + _segment(b"__TEXT", 3, 72), "do not fit"),
    (_header(1, 40) + _segment(b"__TEXT", 0, 40)[:40], "too short"),
    (_header(1, 16) + struct.pack("<2I", 0x1B, 16) + bytes(8), "LC_UUID too short"),
])
def test_bad_headers(data, message):
    with pytest.raises(DecodeError, match=message):
        _macho(data)


def test_bad_fat_headers():
    with pytest.raises(DecodeError, match="claims"):
        fat_slices(Region.from_bytes("java", 0, struct.pack(">2I", 0xCAFEBABE, 52) + bytes(64)))
    fat = struct.pack(">2I5I", 0xCAFEBABE, 1, CPU_TYPE_X86_64, 3, 4096, 4096, 12)
    with pytest.raises(DecodeError, match="past the end"):
        fat_slices(Region.from_bytes("fat", 0, fat.ljust(5000, b"\0")))
    assert fat_slices(Region.from_bytes("tiny", 0, b"\xca\xfe")) == []


def test_section_outside_the_image():
    sect = struct.pack("<16s16s2Q8I", b"__unwind_info", b"__TEXT", 0x1000, 0x100, 0x5000,
                       0, 0, 0, 0, 0, 0, 0)
    data = _header(1, 72 + 80) + _segment(b"__TEXT", 1) + sect
    macho = _macho(data)
    with pytest.raises(DecodeError, match="outside the image"):
        macho.section_region(macho.section("__TEXT", "__unwind_info"))


FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _exercise(data):
    region = Region.from_bytes("fuzz", 0, data)
    try:
        slices = fat_slices(region)
        macho = open_slice(region, slices[0]) if slices else MachO(region)
    except DecodeError:
        return
    for section in macho.sections:
        try:
            macho.section_region(section).read(0, min(section.size, 16))
        except DecodeError:
            pass
    try:
        macho.read_code(macho.image_base, 4)
    except DecodeError:
        pass


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_only_raise_decode_error(data):
    _exercise(data)


@FUZZ
@given(st.binary(max_size=600))
def test_random_load_commands_only_raise_decode_error(commands):
    _exercise(_header(8, len(commands)) + commands)


SEED = (_header(2, 72 + 80 + 24) + _segment(b"__TEXT", 1)
        + struct.pack("<16s16s2Q8I", b"__text", b"__TEXT", 0x1000, 0x20, 0x100, 0, 0, 0, 0, 0, 0, 0)
        + struct.pack("<2I", 0x1B, 24) + bytes(16)).ljust(0x200, b"\x90")


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 0x120), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_headers_only_raise_decode_error(mutations):
    data = bytearray(SEED)
    for position, value in mutations:
        data[position] = value
    _exercise(bytes(data))
