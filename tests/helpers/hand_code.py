"""Hand-assembled code at a fixed address, analysed by plugin.analysis (unit tests)."""
from __future__ import annotations

from plugin.analysis import CodeAnalysis
from plugin.arch import BY_NAME

BASE = 0x1000


def analysis_over(code: bytes, arch: str, functions, **extra) -> CodeAnalysis:
    """A CodeAnalysis of `code` placed at BASE (64 zero bytes after it; reads outside raise)."""
    padded = code + bytes(64)

    def read(address, size):
        offset = address - BASE
        if offset < 0 or offset + size > len(padded):
            raise ValueError("outside the code")
        return padded[offset:offset + size]
    return CodeAnalysis(BY_NAME[arch], read, functions, **extra)
