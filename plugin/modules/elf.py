"""Find an ELF module's unwind tables by reading its headers from the debuggee's memory.

The ELF header and program headers are read through the Target and decoded
by plugin.formats.elf: PT_LOAD gives the mapped (and executable) ranges and
the load bias, PT_GNU_EH_FRAME the `.eh_frame_hdr` (whose eh_frame_ptr
leads to `.eh_frame`), PT_GNU_SFRAME the `.sframe`, PT_ARM_EXIDX the
`.ARM.exidx`, PT_NOTE the build id.
"""
from __future__ import annotations

from plugin import arch as arches
from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.formats import elf
from plugin.modules.module import Module, Segment, TableLocation
from plugin.target import ModuleRef, Target

# Program header types that locate a table, and the section each one gives.
TABLE_SEGMENTS = {
    elf.PT_GNU_EH_FRAME: (".eh_frame_hdr", "PT_GNU_EH_FRAME"),
    elf.PT_GNU_SFRAME: (".sframe", "PT_GNU_SFRAME"),
    elf.PT_ARM_EXIDX: (".ARM.exidx", "PT_ARM_EXIDX"),
}
MAX_PROGRAM_HEADERS = 512
MAX_NOTE_BYTES = 4096


def discover_elf(target: Target, ref: ModuleRef) -> Module:
    """Module for an ELF image whose header is at ref.header_address in the target."""
    header = elf.parse_header(target.read_memory(ref.header_address, elf.HEADER_SIZE))
    if header.phnum == 0 or header.phnum > MAX_PROGRAM_HEADERS:
        raise DecodeError("program headers", header.phoff, "implausible count %d" % header.phnum, DecodeKind.LIMIT)
    arch = arches.BY_ELF_MACHINE.get(header.machine)
    if arch is None:
        raise DecodeError("ELF header", 18, "unsupported machine %d" % header.machine, DecodeKind.UNSUPPORTED)
    data = target.read_memory(ref.header_address + header.phoff, header.phentsize * header.phnum)
    phdrs = elf.parse_program_headers(data, header)
    loads = [p for p in phdrs if p.type == elf.PT_LOAD]
    if not loads:
        raise DecodeError("program headers", header.phoff, "no PT_LOAD segment", DecodeKind.ABSENT)
    bias = ref.header_address - elf.header_link_address(loads)
    module = Module(name=ref.name, path=ref.path, header_address=ref.header_address,
                    arch=arch, load_bias=bias)
    for p in phdrs:
        start = bias + p.vaddr
        if p.type == elf.PT_LOAD:
            module.segments.append(Segment(start, start + p.memsz, p.executable, p.offset))
        elif p.type in TABLE_SEGMENTS:
            section, found_by = TABLE_SEGMENTS[p.type]
            module.tables[section] = TableLocation(section, start, p.memsz, found_by)
        elif p.type == elf.PT_NOTE and module.build_id is None:
            module.build_id = _build_id(target, start, p.memsz, header.order)
    module.segments.sort(key=lambda s: s.start)
    return module


def _build_id(target, address, size, order):
    try:
        notes = target.read_memory(address, min(size, MAX_NOTE_BYTES))
    except MemoryReadError:
        return None
    return elf.build_id(notes, order)
