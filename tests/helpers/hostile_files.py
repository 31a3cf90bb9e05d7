"""Real files built at test time, then damaged in one place: the reproducers of
issue 30 and seeds for the fuzzers (tests/realworld/fuzz_offline.py).

Each builder returns the Path of a fresh copy under `tmp` (a directory the
test owns); the cached build in tests/.build is never changed.
"""

import shutil
import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile

from support import build, need_tool

EM_S390 = 22
SFRAME_ABI_OFFSET = 4          # sfp_preamble (2-byte magic, version, flags), then sfh_abi_arch
SFRAME_ABI_S390X = 4


def thumb_program():
    """tests/fixtures/ehabi.cpp built dynamic as Thumb-2 with arm-linux-gnueabihf-g++."""
    need_tool("arm-linux-gnueabihf-g++")
    return build("ehabi.cpp", ["-mthumb", "-funwind-tables"], name="ehabi-thumb-dyn",
                 compiler="arm-linux-gnueabihf-g++")


def sframe_program():
    """tests/fixtures/chain.c built with `gcc -O2 -Wa,--gsframe` (x86-64, .sframe)."""
    return build("chain.c", ["-O2", "-Wa,--gsframe"], name="chain-sframe")


def copy(source, tmp, name):
    out = Path(tmp) / name
    shutil.copyfile(source, out)
    return out


def patch(path, offset, data):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _elf(path):
    handle = open(path, "rb")
    return handle, ELFFile(handle)


def _layout(path):
    """(elf header facts, {section name: (header offset, sh_offset, sh_size)},
    [(program header offset, p_type, p_offset, p_filesz)])."""
    handle, elf = _elf(path)
    with handle:
        facts = {"little": elf.little_endian, "is64": elf.elfclass == 64,
                 "shoff": elf["e_shoff"], "shentsize": elf["e_shentsize"],
                 "phoff": elf["e_phoff"], "phentsize": elf["e_phentsize"]}
        sections = {}
        for i, sec in enumerate(elf.iter_sections()):
            sections[sec.name] = (facts["shoff"] + i * facts["shentsize"], sec["sh_offset"], sec["sh_size"])
        segments = [(facts["phoff"] + i * facts["phentsize"], seg["p_type"], seg["p_offset"], seg["p_filesz"])
                    for i, seg in enumerate(elf.iter_segments())]
    return facts, sections, segments


def sframe_as_s390x(tmp):
    """The SFrame program with its .sframe ABI byte set to s390x and e_machine to EM_S390
    (the byte order stays little-endian: the decoder takes the file's)."""
    out = copy(sframe_program(), tmp, "sframe-s390x")
    facts, sections, _ = _layout(out)
    patch(out, 18, struct.pack("<H", EM_S390))
    patch(out, sections[".sframe"][1] + SFRAME_ABI_OFFSET, bytes([SFRAME_ABI_S390X]))
    return out


def exidx_cut(tmp, keep=None):
    """The Thumb program with PT_ARM_EXIDX cut to its first `keep` entries (default: all
    but the last, the final CANTUNWIND). The last entry left has no next entry to end it."""
    out = copy(thumb_program(), tmp, "thumb-exidx-cut")
    _, _, segments = _layout(out)
    at = next(off for off, kind, _, _ in segments if kind == "PT_ARM_EXIDX")
    # Elf32_Phdr: p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz (4 bytes each)
    with open(out, "rb") as handle:
        handle.seek(at + 16)
        filesz, memsz = struct.unpack("<II", handle.read(8))
    size = filesz - 8 if keep is None else 8 * keep
    patch(out, at + 16, struct.pack("<II", size, size))
    return out


def exidx_entry_word(tmp, index, word):
    """The Thumb program with index entry `index`'s second word set to `word`."""
    out = copy(thumb_program(), tmp, "thumb-exidx-word")
    _, sections, _ = _layout(out)
    patch(out, sections[".ARM.exidx"][1] + 8 * index + 4, struct.pack("<I", word))
    return out


def strtab_offset(tmp, offset=0x7FFFFFFF):
    """The Thumb program with .strtab's sh_offset set to `offset`."""
    out = copy(thumb_program(), tmp, "thumb-strtab")
    _, sections, _ = _layout(out)
    # Elf32_Shdr: sh_name, sh_type, sh_flags, sh_addr, sh_offset (4 bytes each)
    patch(out, sections[".strtab"][0] + 16, struct.pack("<I", offset))
    return out


def exidx_generic_index(path):
    """The index of the last .ARM.exidx entry whose .ARM.extab entry names a personality
    routine by address (the generic model: C++ functions with handlers)."""
    _, sections, _ = _layout(path)
    data = Path(path).read_bytes()
    _, offset, size = sections[".ARM.exidx"]
    _, extab_offset, extab_size = sections[".ARM.extab"]
    extab_address = _address_of(path, ".ARM.extab")
    exidx_address = _address_of(path, ".ARM.exidx")
    found = None
    for i in range(0, size, 8):
        word = struct.unpack_from("<I", data, offset + i + 4)[0]
        if word == 1 or word & 0x80000000:
            continue
        prel31 = word - (1 << 31) if word & 0x40000000 else word
        table = (exidx_address + i + 4 + prel31) & 0xFFFFFFFF
        first = struct.unpack_from("<I", data, extab_offset + table - extab_address)[0]
        if not first & 0x80000000:
            found = i // 8
    if found is None:
        raise AssertionError("no generic-model .ARM.extab entry in %s" % path)
    return found


def _address_of(path, name):
    handle, elf = _elf(path)
    with handle:
        return elf.get_section_by_name(name)["sh_addr"]


def section_count(tmp, source, count=0x7FFF):
    """A copy of the 64-bit ELF `source` claiming `count` section headers, with no section
    name table (e_shstrndx 0): the table runs past the end of the file, the program
    headers are whole."""
    out = copy(source, tmp, Path(source).name + "-shnum")
    patch(out, 0x3C, struct.pack("<HH", count, 0))     # e_shnum, e_shstrndx
    return out


def sframe_fde_fres(tmp, index, count):
    """The SFrame program with FDE `index`'s FRE count set to `count` (more than the
    FRE sub-section holds)."""
    from plugin.formats.sframe import SFrameSection
    from plugin.memory import Region
    out = copy(sframe_program(), tmp, "sframe-fres")
    _, sections, _ = _layout(out)
    _, offset, size = sections[".sframe"]
    data = out.read_bytes()[offset:offset + size]
    fde = SFrameSection(Region.from_bytes(".sframe", 0, data)).fdes[index]
    patch(out, offset + fde.offset + 12, struct.pack("<I", count))     # after start, size, FRE offset
    return out
