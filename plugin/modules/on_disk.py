"""What the core reads from ELF files on disk (with pyelftools), and why.

Only what is not in the debuggee's memory: `.debug_frame` (never loaded)
and section headers (to find `.eh_frame` when no `.eh_frame_hdr` points at
it). Results are cached per (path, size, mtime).
"""

import os
from functools import lru_cache


def _key(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _sections(key):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    path = key[0]
    out = {}
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            for sec in elf.iter_sections():
                out[sec.name] = (sec["sh_addr"], sec["sh_size"], sec["sh_offset"], sec["sh_type"])
    except (OSError, ELFError, ValueError) as exc:
        raise OSError("cannot read section headers of %s: %s" % (path, exc)) from None
    return out


def sections(path):
    """{name: (sh_addr, sh_size, sh_offset, sh_type)} of an ELF file, {} if it is not there."""
    key = _key(path) if path else None
    return _sections(key) if key else {}


def section_bytes(path, name):
    """(sh_addr, bytes) of a section as stored in the file, or None."""
    info = sections(path).get(name)
    if info is None or info[3] == "SHT_NOBITS":
        return None
    addr, size, offset, _ = info
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(size)
    if len(data) != size:
        raise OSError("%s: section %s is truncated" % (path, name))
    return addr, data
