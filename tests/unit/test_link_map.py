"""The loader's list read from memory (plugin.modules.link_map), on a process image built here
byte by byte (ELF64 and ELF32), and where it is malformed, looped or unreadable."""
from __future__ import annotations

import struct

from plugin.errors import MemoryReadError
from plugin.modules.link_map import Loaded, loaded_objects


class Memory:
    def __init__(self):
        self.pages = {}

    def put(self, address, data):
        for i, byte in enumerate(data):
            self.pages[address + i] = byte

    def read(self, address, size):
        try:
            return bytes(self.pages[address + i] for i in range(size))
        except KeyError:
            raise MemoryReadError(address, size) from None


def image(is_64=True, r_debug=0x7000, names=("/lib/libc.so.6", "/lib/libm.so.6"), loop=False):
    """An executable at 0x400000 (one PT_LOAD, a PT_DYNAMIC at 0x600000 with DT_DEBUG) and its list."""
    word, p = (8, "<Q") if is_64 else (4, "<I")
    memory, base = Memory(), 0x400000
    phoff, phentsize = (64, 56) if is_64 else (52, 32)
    header = bytearray(64)
    header[:6] = b"\x7fELF" + bytes((2 if is_64 else 1, 1))
    if is_64:
        struct.pack_into("<H", header, 18, 62)
        struct.pack_into("<QQ", header, 24, 0x401000, phoff)
        struct.pack_into("<HH", header, 54, phentsize, 2)
    else:
        struct.pack_into("<H", header, 18, 40)
        struct.pack_into("<II", header, 24, 0x401000, phoff)
        struct.pack_into("<HH", header, 42, phentsize, 2)
    memory.put(base, bytes(header))
    fmt = "<IIQQQQQQ" if is_64 else "<IIIIIIII"
    load = (1, 5, 0, base, base, 0x1000, 0x1000, 0x1000) if is_64 else (1, 0, base, base, 0x1000, 0x1000, 5, 0x1000)
    dyn = (2, 6, 0x1000, 0x600000, 0x600000, 64, 64, 8) if is_64 else (2, 0x1000, 0x600000, 0x600000, 64, 64, 6, 4)
    memory.put(base + phoff, struct.pack(fmt, *load) + struct.pack(fmt, *dyn))
    entry = "<qQ" if is_64 else "<iI"
    memory.put(0x600000, struct.pack(entry, 1, 0x10) + struct.pack(entry, 21, r_debug) + bytes(64))
    maps = [0x8000 + 0x100 * i for i in range(len(names) + 1)]
    memory.put(0x7000, struct.pack("<i", 1) + bytes(word - 4) + struct.pack(p, maps[0]))
    for i, address in enumerate(maps):
        name = 0 if i == 0 else 0x9000 + 0x100 * i
        if name:
            memory.put(name, names[i - 1].encode() + b"\0")
        following = maps[i + 1] if i + 1 < len(maps) else (maps[0] if loop else 0)
        memory.put(address, b"".join(struct.pack(p, v) for v in (0x7f0000 * i, name, 0, following, 0)))
    return memory


def test_reads_every_object_after_the_executable_in_the_loaders_order():
    for is_64 in (True, False):
        memory = image(is_64)
        assert loaded_objects(memory.read, 0x400000) == [Loaded("/lib/libc.so.6", 0x7f0000),
                                                         Loaded("/lib/libm.so.6", 0xfe0000)]


def test_a_looped_list_ends_and_each_object_is_given_once():
    memory = image(loop=True)
    assert [o.name for o in loaded_objects(memory.read, 0x400000)] == ["/lib/libc.so.6", "/lib/libm.so.6"]


def test_nothing_where_the_loader_has_not_filled_dt_debug_or_memory_is_unreadable():
    assert loaded_objects(image(r_debug=0).read, 0x400000) == []
    assert loaded_objects(image(r_debug=0x123000).read, 0x400000) == []     # r_debug unreadable
    assert loaded_objects(Memory().read, 0x400000) == []                    # no header at all
    broken = image()
    broken.put(0x400000, b"\x7fELX")
    assert loaded_objects(broken.read, 0x400000) == []
