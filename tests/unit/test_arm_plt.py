"""The GOT slot of an Arm PLT entry (plugin/analysis/arm_plt.py), on Debian's own armhf libraries.

Oracle: objdump names each PLT entry `<NAME@plt>`, and readelf's
R_ARM_JUMP_SLOT relocations give NAME's slot; got_slot(entry) must be that
slot for every entry of the file.
"""
import re
import subprocess

import pytest

from plugin.analysis.arm_plt import got_slot
from support import need_tool

FILES = ["/usr/arm-linux-gnueabihf/lib/librt.so.1", "/usr/arm-linux-gnueabihf/lib/libstdc++.so.6"]


def _reader(path):
    """Read the file's memory image (its PT_LOAD segments at their addresses)."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        segments = [(s["p_vaddr"], s.data()) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]

    def read(address, size):
        for start, data in segments:
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise ValueError("not mapped")
    return read


@pytest.mark.parametrize("path", FILES)
def test_every_plt_entry_names_its_relocations_slot(path):
    dump = subprocess.run([need_tool("arm-linux-gnueabihf-objdump"), "-d", "-j", ".plt", path],
                          capture_output=True, text=True, check=True).stdout
    entries = {name: int(address, 16) for address, name in re.findall(r"^([0-9a-f]+) <(\S+)@plt>:", dump, re.M)}
    relocs = subprocess.run([need_tool("arm-linux-gnueabihf-readelf"), "-rW", path], capture_output=True,
                            text=True, check=True).stdout
    slots = {name.split("@")[0]: int(offset, 16)
             for offset, name in re.findall(r"^([0-9a-f]+)\s+\S+\s+R_ARM_JUMP_SLOT\s+\S+\s+(\S+)", relocs, re.M)}
    assert len(entries) >= 5
    read = _reader(path)
    for name, entry in entries.items():
        assert got_slot(read, entry) == slots[name], name
        assert got_slot(read, entry + 2) is None        # not the start of an entry


def test_words_that_are_not_a_plt_entry_give_none():
    assert got_slot(lambda address, size: b"\x00" * size, 0x1000) is None
    assert got_slot(lambda address, size: b"\x00\xc6\x8f", 0x1000) is None      # short read
    assert got_slot(lambda address, size: (_ for _ in ()).throw(OSError("unreadable")), 0x1000) is None
