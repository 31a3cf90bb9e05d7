"""The vmlinux ELF inside a bzImage: `python extract_vmlinux.py BZIMAGE OUT`.

What the kernel's scripts/extract-vmlinux does, in a few lines of our own:
find each compressed stream's magic in the image (xz, zstd, gzip), decompress
from there and keep the first result that is an ELF file.
"""
from __future__ import annotations

import gzip
import lzma
import sys
import zlib

MAGICS = ((b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x1f\x8b\x08", "gzip"))


def _decompress(kind: str, data: bytes) -> bytes:
    if kind == "xz":
        return lzma.LZMADecompressor().decompress(data)
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    import zstandard
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


def extract(image: bytes) -> bytes:
    """The ELF file compressed in `image`; ValueError when there is none."""
    for magic, kind in MAGICS:
        start = image.find(magic)
        while start >= 0:
            try:
                out = _decompress(kind, image[start:])
            except (lzma.LZMAError, zlib.error, gzip.BadGzipFile, ValueError, Exception):
                out = b""
            if out.startswith(b"\x7fELF"):
                return out
            start = image.find(magic, start + 1)
    raise ValueError("no xz, zstd or gzip stream holding an ELF file")


def main(argv):
    if len(argv) != 3:
        print("usage: extract_vmlinux.py BZIMAGE OUT", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        image = f.read()
    try:
        elf = extract(image)
    except ValueError as exc:
        print("extract_vmlinux: %s: %s" % (argv[1], exc), file=sys.stderr)
        return 1
    with open(argv[2], "wb") as f:
        f.write(elf)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
