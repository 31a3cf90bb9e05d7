"""Find a PE image's unwind table by reading its headers from memory.

A PE image mapped into a Linux process (as Wine's loader maps them, or a
program that loads one itself) is laid out by its section table: the DOS
header with "MZ" at the image's base, the PE headers after it, and every
section at base + its RVA. From the headers read in memory:

  * the load bias: the base the image is mapped at minus its ImageBase
    (an image mapped elsewhere than its preferred base must have had its
    base relocations applied; .pdata holds RVAs, which need none);
  * the mapped ranges: the headers, then every section, executable when its
    characteristics have IMAGE_SCN_MEM_EXECUTE;
  * the table: the exception directory (data directory 3), the .pdata
    RUNTIME_FUNCTION array, at base + its RVA ("exception directory").

No debugger lists such an image as a module: scan_mappings finds one at the
start of a mapping by its headers (plugin.formats.pe decodes them; any
damage is a DecodeError, as for every other table).
"""
from __future__ import annotations

import bisect
from typing import Iterable, List, Optional, Set, Tuple

from plugin import arch as arches
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import pe
from plugin.modules.module import Module, Segment, TableLocation
from plugin.target import Mapping, ModuleRef, Target

SECTION = ".pdata"
FOUND_BY = "exception directory of the PE optional header"
ARCH_OF_MACHINE = {pe.Machine.AMD64: "x86_64", pe.Machine.ARM64: "aarch64"}
PAGE = 0x1000


def _page_up(value: int) -> int:
    return (value + PAGE - 1) & ~(PAGE - 1)


def read_headers(target: Target, address: int) -> pe.PEHeaders:
    """The headers of the PE image whose DOS header is at address in the target."""
    return pe.read_headers(target.read_memory, address)


def module_from_headers(headers: pe.PEHeaders, name: str, path: str | None, base: int) -> Module:
    """Module for a PE image whose headers are at base, each section at base + its RVA."""
    module = Module(name=name, path=path, header_address=base,
                    arch=arches.by_name(ARCH_OF_MACHINE[headers.machine]), format="pe",
                    load_bias=base - headers.image_base)
    first = min((s.virtual_address for s in headers.sections), default=PAGE)
    module.segments.append(Segment(base, base + max(first, PAGE), False, 0))
    for s in headers.sections:
        size = _page_up(max(s.virtual_size, s.raw_size))
        if size:
            module.segments.append(Segment(base + s.virtual_address, base + s.virtual_address + size,
                                           s.executable, s.raw_offset))
    module.segments.sort(key=lambda seg: seg.start)
    if headers.exception_rva and headers.exception_size:
        module.tables[SECTION] = TableLocation(SECTION, base + headers.exception_rva,
                                               headers.exception_size, FOUND_BY)
    else:
        module.problems.append("no exception directory (.pdata)")
    return module


def discover_pe(target: Target, ref: ModuleRef) -> Module:
    """Module for the PE image whose DOS header is at ref.header_address."""
    return module_from_headers(read_headers(target, ref.header_address), ref.name, ref.path,
                               ref.header_address)


def looks_like_pe(target: Target, address: int) -> bool:
    """Do the bytes at address begin a PE image this plugin reads (MZ, PE, AMD64 or ARM64)?"""
    try:
        if not pe.is_pe(target.read_memory(address, 2)):
            return False
        read_headers(target, address)
    except (DecodeError, MemoryReadError):
        return False
    return True


def image_name(mapping: Mapping) -> str:
    """A PE module's name: its file's base name, or where it is for an anonymous mapping."""
    if mapping.name.startswith("/"):
        return mapping.name.rsplit("/", 1)[-1]
    return "PE image at 0x%x" % mapping.start


def scan_mappings(target: Target, mappings: Iterable[Mapping], known: Set[int] = frozenset()) -> List[ModuleRef]:
    """ModuleRefs of the PE images that begin a mapping: a file mapped from offset 0, or anonymous
    memory a loader copied the image into (never a kernel's special mapping, "[stack]" etc.).
    Only read-only mappings are looked at: a loader leaves the headers' page read-only (Windows'
    and Wine's do), and so heaps and stacks, most of a process's mappings, cost no read.
    Addresses in `known` (modules found otherwise) are not looked at again."""
    refs = []
    for m in mappings:
        if not m.readable or m.writable or m.offset != 0 or m.start in known:
            continue
        if m.name and not m.name.startswith("/"):
            continue
        if looks_like_pe(target, m.start):
            refs.append(ModuleRef(image_name(m), m.start, m.name if m.name.startswith("/") else None))
    return refs


def function_at(target: Target, module: Module, address: int) -> Optional[Tuple[str, int]]:
    """(name, start) of the exported function holding address in a PE module, or None: the
    .pdata entry holding the address must begin exactly at an export (an unexported function,
    or a chained fragment, stays unnamed rather than taking a neighbour's name)."""
    named = module.cache.get(_NAMES)
    if named is None:
        named = module.cache[_NAMES] = _names(target, module)
    starts, names = named
    rva = address - module.header_address
    i = bisect.bisect_right(starts, rva) - 1
    if i < 0 or names[i] is None:
        return None
    return names[i], module.header_address + starts[i]


_NAMES = "pe names"         # module.cache key: (sorted .pdata entry starts, export name or None each)


def _names(target: Target, module: Module) -> Tuple[List[int], List[Optional[str]]]:
    base = module.header_address
    try:
        headers = read_headers(target, base)
        by_rva = dict(pe.exports(lambda rva, size: target.read_memory(base + rva, size), headers))
        layout = "<III" if headers.machine == pe.Machine.AMD64 else "<II"
        entries = pe.exception_entries(lambda rva, size: target.read_memory(base + rva, size),
                                       headers.exception_rva, headers.exception_size, layout) \
            if headers.exception_rva else []
    except (DecodeError, MemoryReadError):
        return [], []
    points = {}                 # rva -> the name that holds from there (None: unnamed)
    for entry in entries:
        if len(entry) == 3:     # x64 entries say where a function ends: past it, no name holds
            points.setdefault(entry[1], None)
    for entry in entries:
        points[entry[0]] = by_rva.get(entry[0])
    starts = sorted(points)
    return starts, [points[start] for start in starts]
