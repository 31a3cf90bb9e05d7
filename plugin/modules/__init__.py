"""Find each loaded module's unwind tables by reading its headers from memory.

For an ELF module the ELF header and program headers are read through the
Target: PT_LOAD gives the mapped (and executable) ranges and the load bias,
PT_GNU_EH_FRAME the `.eh_frame_hdr` (whose eh_frame_ptr leads to
`.eh_frame`), PT_GNU_SFRAME the `.sframe`, PT_ARM_EXIDX the `.ARM.exidx`,
PT_NOTE the build id. Mach-O images (load commands: LC_SEGMENT(_64),
LC_UUID) are read by plugin/modules/macho.py. Nothing here reads the file
on disk except where the table is not loaded at all (`.debug_frame`) or memory has no pointer to it
(`.eh_frame` without a header): those are marked with where they came from.
"""

import bisect
import struct
from dataclasses import dataclass, field

from plugin import arch as arches
from plugin.errors import DecodeError, MemoryReadError
from plugin.memory import Region

PT_LOAD = 1
PT_NOTE = 4
PT_GNU_EH_FRAME = 0x6474E550
PT_GNU_SFRAME = 0x6474E554
PT_ARM_EXIDX = 0x70000001
PF_X = 1
NT_GNU_BUILD_ID = 3
ELF_MAGIC = b"\x7fELF"


@dataclass
class Segment:
    start: int
    end: int
    executable: bool
    file_offset: int = 0


@dataclass
class TableLocation:
    """Where one unwind table is: its address and size in the debuggee, and how we found it."""
    section: str
    address: int
    size: int
    found_by: str          # e.g. "PT_GNU_EH_FRAME", "eh_frame_ptr", "section headers of FILE"
    in_memory: bool = True


@dataclass
class Module:
    name: str
    path: str
    header_address: int
    arch: object
    format: str = "elf"
    load_bias: int = 0
    segments: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)      # section name -> TableLocation
    build_id: str = None
    uuid: str = None
    problems: list = field(default_factory=list)    # what could not be read, for `unwind modules`
    cache: dict = field(default_factory=dict)       # decoded tables, owned by strategies

    @property
    def start(self):
        return min(s.start for s in self.segments) if self.segments else self.header_address

    @property
    def end(self):
        return max(s.end for s in self.segments) if self.segments else self.header_address

    def contains(self, address):
        return any(s.start <= address < s.end for s in self.segments)

    def is_executable(self, address):
        return any(s.executable and s.start <= address < s.end for s in self.segments)

    def segment_end(self, address):
        for s in self.segments:
            if s.start <= address < s.end:
                return s.end
        return None


def _elf_layout(head):
    """(class64, byteorder, machine, phoff, phentsize, phnum) from the first 64 bytes."""
    if head[:4] != ELF_MAGIC:
        raise DecodeError("ELF header", 0, "no ELF magic")
    is64 = head[4] == 2
    order = "<" if head[5] == 1 else ">"
    machine = struct.unpack_from(order + "H", head, 18)[0]
    if is64:
        phoff, = struct.unpack_from(order + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
    else:
        phoff, = struct.unpack_from(order + "I", head, 28)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
    return is64, order, machine, phoff, phentsize, phnum


def _program_headers(data, is64, order, phentsize, phnum):
    fmt = order + ("IIQQQQQQ" if is64 else "IIIIIIII")
    size = struct.calcsize(fmt)
    if phentsize < size:
        raise DecodeError("program headers", 0, "entry size %d is too small" % phentsize)
    out = []
    for i in range(phnum):
        fields = struct.unpack_from(fmt, data, i * phentsize)
        if is64:
            p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = fields
        else:
            p_type, p_offset, p_vaddr, _, p_filesz, p_memsz, p_flags, _ = fields
        out.append((p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
    return out


def discover_elf(target, ref):
    """Module for an ELF image whose header is at ref.header_address in the target."""
    head = target.read_memory(ref.header_address, 64)
    is64, order, machine, phoff, phentsize, phnum = _elf_layout(head)
    if phnum == 0 or phnum > 512:
        raise DecodeError("program headers", phoff, "implausible count %d" % phnum)
    arch = arches.BY_ELF_MACHINE.get(machine)
    if arch is None:
        raise DecodeError("ELF header", 18, "unsupported machine %d" % machine)
    phdrs = _program_headers(target.read_memory(ref.header_address + phoff, phentsize * phnum),
                             is64, order, phentsize, phnum)
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    if not loads:
        raise DecodeError("program headers", phoff, "no PT_LOAD segment")
    first = min(loads, key=lambda p: p[3])
    # The header sits at the start of the lowest segment (file offset 0).
    bias = ref.header_address - (first[3] - first[2])
    module = Module(name=ref.name, path=ref.path, header_address=ref.header_address,
                    arch=arch, load_bias=bias)
    for p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz in phdrs:
        start = bias + p_vaddr
        if p_type == PT_LOAD:
            module.segments.append(Segment(start, start + p_memsz, bool(p_flags & PF_X), p_offset))
        elif p_type == PT_GNU_EH_FRAME:
            module.tables[".eh_frame_hdr"] = TableLocation(".eh_frame_hdr", start, p_memsz, "PT_GNU_EH_FRAME")
        elif p_type == PT_GNU_SFRAME:
            module.tables[".sframe"] = TableLocation(".sframe", start, p_memsz, "PT_GNU_SFRAME")
        elif p_type == PT_ARM_EXIDX:
            module.tables[".ARM.exidx"] = TableLocation(".ARM.exidx", start, p_memsz, "PT_ARM_EXIDX")
        elif p_type == PT_NOTE and module.build_id is None:
            module.build_id = _build_id(target, start, p_memsz, order)
    module.segments.sort(key=lambda s: s.start)
    return module


def _build_id(target, address, size, order):
    try:
        data = target.read_memory(address, min(size, 4096))
    except MemoryReadError:
        return None
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from(order + "III", data, pos)
        name_end = pos + 12 + ((namesz + 3) & ~3)
        desc_end = name_end + ((descsz + 3) & ~3)
        if desc_end > len(data):
            return None
        if kind == NT_GNU_BUILD_ID and data[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
            return data[name_end:name_end + descsz].hex()
        pos = desc_end
    return None


def discover(target, ref):
    """Module for ref (ELF or Mach-O); DecodeError/MemoryReadError if unreadable."""
    magic = target.read_memory(ref.header_address, 4)
    if magic == ELF_MAGIC:
        return discover_elf(target, ref)
    # Imported here: macho_modules builds on this module's Module and Segment.
    from plugin.modules.macho import discover_macho, is_macho_magic
    if is_macho_magic(magic):
        return discover_macho(target, ref)
    raise DecodeError("module header", 0, "no ELF or Mach-O magic at 0x%x" % ref.header_address)


def region_of(target, location):
    """A Region over a table that lives in the debuggee's memory."""
    return Region(location.section, location.address, location.size, target.read_memory)


class ModuleMap:
    """The target's modules, discovered once per module-list generation.

    Modules that cannot be read are kept in `failed` with the reason, so
    `unwind modules` can say why a library has no tables.
    """

    def __init__(self, target):
        self.target = target
        self.generation = None
        self.modules = []
        self.failed = []
        self._starts = []

    def refresh(self):
        generation = getattr(self.target, "generation", 0)
        if generation == self.generation:
            return
        self.generation = generation
        self.modules, self.failed = [], []
        for ref in self.target.modules():
            try:
                self.modules.append(discover(self.target, ref))
            except (DecodeError, MemoryReadError) as exc:
                self.failed.append((ref, str(exc)))
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def add(self, module):
        """Add a module that was not discovered from memory (an object file's sections)."""
        self.refresh()
        self.modules.append(module)
        self.modules.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.modules]

    def find(self, address):
        """The module whose mapped segments contain address, or None."""
        self.refresh()
        i = bisect.bisect_right(self._starts, address) - 1
        # Segments of neighbouring modules may interleave; look a little back.
        for module in self.modules[max(0, i - 2):i + 1][::-1]:
            if module.contains(address):
                return module
        return None

    def all(self):
        self.refresh()
        return list(self.modules)
