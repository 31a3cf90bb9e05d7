"""Compressed ELF sections: SHF_COMPRESSED (the ELF gABI's Elf32_Chdr /
Elf64_Chdr header, then a zlib or zstd stream) and GNU `.zdebug_*` ("ZLIB",
an 8-byte big-endian size, then a zlib stream).

The size a header declares is checked before it is believed: it must be
under MAX_SIZE, decompression stops one byte past it, and a stream that
gives more or fewer bytes, or is cut short, is a DecodeError. zlib comes
from the standard library, zstd from the `zstandard` package.
"""
from __future__ import annotations

import struct
import zlib

from plugin.errors import DecodeError, DecodeKind

SHF_COMPRESSED = 0x800
ELFCOMPRESS_ZLIB = 1
ELFCOMPRESS_ZSTD = 2
GNU_MAGIC = b"ZLIB"
MAX_SIZE = 256 << 20        # no real .debug_frame comes near this


def shf_compressed(name: str, data: bytes, is64: bool, little: bool) -> tuple[bytes, str]:
    """(the section's bytes, "zlib" or "zstd") of an SHF_COMPRESSED section."""
    order = "<" if little else ">"
    fmt = order + ("IIQQ" if is64 else "III")
    if len(data) < struct.calcsize(fmt):
        raise DecodeError(name, 0, "compressed section too short for its header (%d bytes)" % len(data),
                          DecodeKind.TRUNCATED)
    fields = struct.unpack_from(fmt, data)
    kind, size = fields[0], fields[2 if is64 else 1]
    payload = data[struct.calcsize(fmt):]
    if kind == ELFCOMPRESS_ZLIB:
        return _inflate(name, payload, size, struct.calcsize(fmt)), "zlib"
    if kind == ELFCOMPRESS_ZSTD:
        return _unzstd(name, payload, size, struct.calcsize(fmt)), "zstd"
    raise DecodeError(name, 0, "unknown compression type %d" % kind, DecodeKind.UNSUPPORTED)


def gnu_zdebug(name: str, data: bytes) -> bytes:
    """The bytes of a GNU .zdebug_* section."""
    if len(data) < 12 or data[:4] != GNU_MAGIC:
        raise DecodeError(name, 0, "not a .zdebug section: it does not start with 'ZLIB' and a size",
                          DecodeKind.MALFORMED)
    return _inflate(name, data[12:], int.from_bytes(data[4:12], "big"), 12)


def _check_size(name, size):
    if size > MAX_SIZE:
        raise DecodeError(name, 0, "declares an uncompressed size of %d bytes, over the limit of %d"
                          % (size, MAX_SIZE), DecodeKind.LIMIT)


def _check_result(name, out, size, offset):
    if len(out) != size:
        raise DecodeError(name, offset, "declares %d bytes uncompressed, but the stream holds %s"
                          % (size, "more" if len(out) > size else "%d" % len(out)), DecodeKind.MALFORMED)
    return out


def _inflate(name, payload, size, offset):
    _check_size(name, size)
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(payload, size + 1)
    except zlib.error as exc:
        raise DecodeError(name, offset, "bad zlib stream: %s" % exc, DecodeKind.MALFORMED) from None
    if len(out) == size and not stream.eof:
        raise DecodeError(name, offset, "zlib stream cut short or longer than the declared %d bytes"
                          % size, DecodeKind.MALFORMED)
    return _check_result(name, out, size, offset)


def _unzstd(name, payload, size, offset):
    _check_size(name, size)
    try:
        import zstandard
    except ImportError:
        raise DecodeError(name, offset, "zstd-compressed; reading it needs the zstandard package "
                                        "(pip install zstandard)", DecodeKind.UNSUPPORTED) from None
    try:
        with zstandard.ZstdDecompressor().stream_reader(payload) as reader:
            chunks, total = [], 0
            while total <= size:
                chunk = reader.read(size + 1 - total)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        out = b"".join(chunks)
    except zstandard.ZstdError as exc:
        raise DecodeError(name, offset, "bad zstd stream: %s" % exc, DecodeKind.MALFORMED) from None
    return _check_result(name, out, size, offset)
