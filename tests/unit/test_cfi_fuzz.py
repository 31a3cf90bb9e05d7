"""Property tests: whatever the bytes, every entry point of cfi.py either
works or raises DecodeError, and finishes; so do the decompression of a
compressed .debug_frame and the dump of every entry (text and JSON) that
decoded. The whole-file fuzz over every source is tests/realworld/fuzz_targets.py."""

import json
import struct
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugin.arch import aarch64, s390x, x86_64
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import compressed
from plugin.formats.cfi import FDE, CfiSection, EhFrameHdr, describe, execute, execute_contained, row_at
from plugin.memory import Region
from plugin.render import tables
from plugin.render.cfi_dump import Want, fde_converter
from plugin.render.expression import row_rules
from cfi_builder import X86_RBP, X86_RBX, X86_RIP, X86_RSP, Builder, hdr_bytes, sleb

ARCHES = [x86_64.ARCH, aarch64.ARCH, s390x.ARCH]
SETTINGS = settings(max_examples=400, deadline=2000,
                    suppress_health_check=[HealthCheck.too_slow])


def deref(address, size):
    if address % 3 == 0:
        raise MemoryReadError(address, size)
    return (address & 0xFFFF).to_bytes(size, "little")


def valid_eh_frame(kind="eh_frame"):
    """A section using most of the format: several CIEs, augmentations,
    encodings, and a program with every kind of instruction."""
    b = Builder(kind=kind, address=0x10000)
    plain = b.cie(bytes([0x0C, X86_RSP, 8, 0x80 | X86_RIP, 1]))
    aug = bytes([0x9B]) + struct.pack("<i", 0x100) + bytes([0x1B, 0x1B])
    fancy = b.cie(bytes([0x0C, X86_RSP, 8, 0x80 | X86_RIP, 1, 0x0A, 0x0B]), version=3,
                  augmentation="zPLRS", aug_data=aug, code_align=1)
    program = bytes([0x41, 0x0E, 16, 0x86, 2, 0x42, 0x0D, X86_RBP, 0x0A, 0x41, 0x0C, X86_RSP, 8,
                     0xC6, 0x41, 0x0B, 0x02, 9, 0x05, X86_RBX, 3, 0x11, 12]) + sleb(-4) + \
        bytes([0x14, 13, 5, 0x15, 14, 2, 0x09, 15, 3, 0x08, 1, 0x07, 2, 0x10, 4, 2, 0x76, 0x10,
               0x16, 5, 1, 0x30, 0x2F, 8, 2, 0x2E, 16, 0x03, 1, 0, 0x04, 1, 0, 0, 0,
               0x12, X86_RSP, 0x7E, 0x13, 0x7C, 0x06, X86_RBX, 0x2D, 0x0F, 2, 0x77, 8])
    b.fde(plain, 0x1000, 0x40, program)
    b.fde(fancy, 0x2000, 0x80, program, aug_data=struct.pack("<i", 0x40))
    b.fde(plain, 0x3000, 0x10, bytes([0x44, 0x0E, 16]), is_64=True)
    b.terminator()
    return bytes(b.data)


VALID = valid_eh_frame()
VALID_DEBUG_FRAME = valid_eh_frame("debug_frame")


def exercise(data, kind, arch, address=0x10000):
    """Every public entry point; each call may only succeed or raise DecodeError."""
    region = Region.from_bytes("." + kind, address, data, arch.byteorder)
    section = CfiSection(region, kind, arch, bases={"text": 0, "data": 0x8000}, deref=deref)
    fdes = []
    try:
        for entry in section.entries():
            describe(entry, arch)
            if isinstance(entry, FDE):
                fdes.append(entry)
    except DecodeError:
        pass
    dump(fdes, arch)
    for fde in fdes:
        try:
            rows = execute(fde, arch)
            # Rows tile [start, end) in order: contiguous, none empty (but the
            # one row of an empty FDE).
            assert rows[0].address == fde.start and rows[-1].end == fde.end
            assert all(a.end == b.address for a, b in zip(rows, rows[1:]))
            assert all(r.address < r.end for r in rows) or len(rows) == 1
        except DecodeError:
            pass
        for pc in (fde.start, (fde.start + fde.end) // 2, fde.end - 1):
            try:
                row_at(fde, pc, arch)
            except DecodeError:
                pass
    for offset in range(0, min(len(data), 64), 4):
        for method in (section.cie_at, section.fde_at):
            try:
                method(offset)
            except DecodeError:
                pass
    for pc in (0, 0x1000, 0x2010, 0x3000, 2 ** 64 - 1):
        try:
            section.find_fde(pc)
        except DecodeError:
            pass


def dump(fdes, arch):
    """Every FDE as `unwind tables` shows it, in JSON and in text: never raises."""
    for want in (Want.BOTH, Want.TEXT):
        problems = []
        entries = [fde_converter("m", arch, None, problems, want)(fde) for fde in fdes]
        json.dumps(entries)
        source = {"kind": "cfi", "module": "m", "section": ".eh_frame", "address": 0x10000, "entries": entries}
        list(tables._source_lines(source))
    for fde in fdes[:2]:
        rows, _ = execute_contained(fde, arch)
        for row in rows[:8]:
            row_rules(row, arch, verbose=True)


def mutate(data, edits):
    out = bytearray(data)
    for position, value, action in edits:
        if not out:
            break
        position %= len(out)
        if action == 0:
            out[position] = value
        elif action == 1:
            del out[position:]
        elif action == 2:
            out.insert(position, value)
        else:
            del out[position]
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255), st.integers(0, 3)),
                 min_size=1, max_size=6)


def test_the_compressed_valid_section_really_is_valid():
    plain = CfiSection(Region.from_bytes(".debug_frame", 0x10000, VALID_DEBUG_FRAME), "debug_frame", x86_64.ARCH)
    for how in ("shf64", "shf32", "gnu"):
        data = compress(VALID_DEBUG_FRAME, how)
        content = compressed.gnu_zdebug("z", data) if how == "gnu" else \
            compressed.shf_compressed("c", data, how == "shf64", True)[0]
        section = CfiSection(Region.from_bytes(".debug_frame", 0x10000, content), "debug_frame", x86_64.ARCH)
        assert section.fdes() and len(section.fdes()) == len(plain.fdes())


def test_the_valid_section_really_is_valid():
    section = CfiSection(Region.from_bytes(".eh_frame", 0x10000, VALID), "eh_frame",
                         x86_64.ARCH, deref=deref)
    assert len(section.fdes()) == 3
    for fde in section.fdes():
        assert execute(fde, x86_64.ARCH)


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from(["eh_frame", "debug_frame"]),
       st.sampled_from(ARCHES))
def test_random_bytes(data, kind, arch):
    exercise(data, kind, arch)


@SETTINGS
@given(edits, st.sampled_from(ARCHES))
def test_mutated_valid_eh_frame(changes, arch):
    exercise(mutate(VALID, changes), "eh_frame", arch)


overwrites = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255), st.just(0)),
                      min_size=1, max_size=4)


@SETTINGS
@given(overwrites, st.sampled_from(ARCHES))
def test_overwritten_bytes_keep_the_layout(changes, arch):
    """Byte overwrites (no inserts/deletes) mostly keep lengths intact, so they
    reach the augmentation, pointer and instruction decoders."""
    exercise(mutate(VALID, changes), "eh_frame", arch)


@SETTINGS
@given(edits)
def test_mutated_valid_section_read_as_debug_frame(changes):
    exercise(mutate(VALID, changes), "debug_frame", x86_64.ARCH)


@SETTINGS
@given(st.binary(min_size=1, max_size=40))
def test_random_program_in_a_valid_fde(program):
    b = Builder(address=0x10000)
    cie = b.cie(bytes([0x0C, X86_RSP, 8]))
    b.fde(cie, 0x1000, 0x100, program, pad=False)
    b.terminator()
    exercise(bytes(b.data), "eh_frame", x86_64.ARCH)
    exercise(bytes(b.data), "eh_frame", aarch64.ARCH)


def valid_hdr():
    table = [(0x1000 + 0x40 * i, 0x10000 + 0x18 * i) for i in range(20)]
    return hdr_bytes(table, 0x8000, 0x10000)


VALID_HDR = valid_hdr()


def exercise_hdr(data, arch):
    try:
        hdr = EhFrameHdr(Region.from_bytes(".eh_frame_hdr", 0x8000, data, arch.byteorder),
                         arch, deref=deref)
    except DecodeError:
        return
    section = CfiSection(Region.from_bytes(".eh_frame", 0x10000, VALID), "eh_frame", arch)
    for pc in (0, 0xFFF, 0x1000, 0x1041, 0x1500, 2 ** 64 - 1):
        try:
            hdr.lookup(pc)
        except DecodeError:
            pass
        try:
            section.find_fde(pc, hdr)
        except DecodeError:
            pass


@SETTINGS
@given(st.binary(max_size=120), st.sampled_from(ARCHES))
def test_hdr_random_bytes(data, arch):
    exercise_hdr(data, arch)


@SETTINGS
@given(edits)
def test_hdr_mutated(changes):
    exercise_hdr(mutate(VALID_HDR, changes), x86_64.ARCH)


def compress(content, how):
    if how == "shf64":
        return struct.pack("<IIQQ", compressed.ELFCOMPRESS_ZLIB, 0, len(content), 1) + zlib.compress(content)
    if how == "shf32":
        return struct.pack("<III", compressed.ELFCOMPRESS_ZLIB, len(content), 1) + zlib.compress(content)
    return compressed.GNU_MAGIC + len(content).to_bytes(8, "big") + zlib.compress(content)


def exercise_compressed(data, how, arch):
    try:
        if how == "gnu":
            content = compressed.gnu_zdebug(".zdebug_frame", data)
        else:
            content, _ = compressed.shf_compressed(".debug_frame", data, how == "shf64", True)
    except DecodeError:
        return
    exercise(content, "debug_frame", arch)


COMPRESSED_SETTINGS = settings(SETTINGS, max_examples=200)


@COMPRESSED_SETTINGS
@given(edits, st.sampled_from(["shf64", "shf32", "gnu"]), st.booleans(), st.sampled_from(ARCHES))
def test_compressed_debug_frame(changes, how, content_not_stream, arch):
    """Mutations of the section's content (compressed again) or of its compressed bytes."""
    if content_not_stream:
        data = compress(mutate(VALID_DEBUG_FRAME, changes), how)
    else:
        data = mutate(compress(VALID_DEBUG_FRAME, how), changes)
    exercise_compressed(data, how, arch)


@COMPRESSED_SETTINGS
@given(st.binary(max_size=80), st.sampled_from(["shf64", "shf32", "gnu"]))
def test_compressed_random_bytes(data, how):
    exercise_compressed(data, how, x86_64.ARCH)
