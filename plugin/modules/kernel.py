"""The Linux kernel as a module, found without an ELF header in memory (x86-64).

A kernel debugged through QEMU's gdbstub has no ELF header in guest memory
and no link map: it is found from the symbols of a file the debugger loaded
(a vmlinux with symbols, or an ELF made from /proc/kallsyms by
plugin.modules.kallsyms). Those files are read here, not through the
debugger: a symbol lookup through GDB's expression evaluator may build
frames, which the unwinder must not do.

- the text is [_stext, _etext) and [_sinittext, _einittext), executable;
- the ORC tables are [__start_orc_unwind_ip, __stop_orc_unwind_ip) and
  [__start_orc_unwind, __stop_orc_unwind), and [__start_orc_header,
  __stop_orc_header) since 6.4 (6.3.10);
- KASLR's slide: a vmlinux's symbols are link addresses; the kernel runs
  at a multiple of 2 MiB (CONFIG_PHYSICAL_ALIGN) above them. The slide is
  the one at which `linux_banner` reads "Linux version" in memory: 0 first
  (symbols from /proc/kallsyms, or a file loaded with `-o SLIDE`), then the
  candidates within the kernel's 1 GiB image area.
"""
from __future__ import annotations

import os
import struct
from functools import lru_cache
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.formats import orc
from plugin.modules.module import Module, ModuleFormat, Segment, TableLocation

NAMES = ("_text", "_stext", "_etext", "_sinittext", "_einittext", "_end", "linux_banner", "modules",
         "__start_orc_unwind_ip", "__stop_orc_unwind_ip", "__start_orc_unwind", "__stop_orc_unwind",
         "__start_orc_header", "__stop_orc_header", "ftrace_ops_list", "ftrace_list_end",
         "ftrace_caller", "ftrace_caller_end", "ftrace_regs_caller", "ftrace_regs_caller_end")
BANNER = b"Linux version "
SLIDE_ALIGN = 0x200000                  # CONFIG_PHYSICAL_ALIGN on x86-64 (Debian, defconfig)
IMAGE_AREA = (0xFFFFFFFF80000000, 0xFFFFFFFFC0000000)     # __START_KERNEL_map .. + KERNEL_IMAGE_SIZE (1 GiB)
KERNEL_NAME = "[kernel]"
TABLES = (".orc_unwind_ip", ".orc_unwind", ".orc_header")

Read = Callable[[int, int], bytes]


@lru_cache(maxsize=16)
def _file_symbols(key: Tuple[str, int, int]) -> Dict[str, int]:
    """The NAMES defined in an ELF64 file's .symtab ({} if it has none of them or is no ELF64)."""
    path = key[0]
    with open(path, "rb") as handle:
        head = handle.read(64)
        if len(head) < 64 or head[:5] != b"\x7fELF\x02" or head[5] != 1:
            return {}
        shoff, = struct.unpack_from("<Q", head, 40)
        shentsize, shnum = struct.unpack_from("<HH", head, 58)
        if shentsize != 64 or not 0 < shnum < 65536:
            return {}
        handle.seek(shoff)
        headers = [struct.unpack_from("<IIQQQQIIQQ", handle.read(64)) for _ in range(shnum)]
        symtab = next((h for h in headers if h[1] == 2 and h[9] == 24), None)     # SHT_SYMTAB
        if symtab is None or symtab[6] >= shnum:
            return {}
        strtab = headers[symtab[6]]
        handle.seek(strtab[4])
        strings = handle.read(strtab[5])
        wanted = {}
        for name in NAMES:
            at = strings.find(b"\0" + name.encode() + b"\0")
            if at >= 0:
                wanted[at + 1] = name
        if "__start_orc_unwind_ip" not in wanted.values():
            return {}
        handle.seek(symtab[4])
        table = handle.read(symtab[5] - symtab[5] % 24)
    found = {}
    for st_name, _, _, shndx, value, _ in struct.iter_unpack("<IBBHQQ", table):
        name = wanted.get(st_name)
        if name is not None and shndx != 0 and name not in found:
            found[name] = value
    return found


def file_symbols(path: str) -> Dict[str, int]:
    """The kernel's NAMES in a symbol file ({} when it is no kernel's, or unreadable)."""
    try:
        st = os.stat(path)
        return _file_symbols((path, st.st_size, st.st_mtime_ns))
    except (OSError, struct.error):
        return {}


def find_slide(symbols: Dict[str, int], read: Read) -> Optional[int]:
    """The slide at which linux_banner reads "Linux version" in memory, or None."""
    banner = symbols.get("linux_banner")
    if banner is None:
        return None
    low = IMAGE_AREA[0] - min(symbols.values())
    high = IMAGE_AREA[1] - max(symbols.values())
    candidates = [0] + [s for s in range(low - low % SLIDE_ALIGN, high, SLIDE_ALIGN) if s]
    for slide in candidates:
        try:
            if read(banner + slide, len(BANNER)) == BANNER:
                return slide
        except (MemoryReadError, OSError, ValueError):
            continue
    return None


def _release(read: Read, banner: int) -> Optional[str]:
    try:
        return orc.find_version_string(read(banner, 64))
    except (MemoryReadError, OSError, ValueError):
        return None


def discover_kernel(paths: Iterable[str], read: Read, arch) -> Union[Module, str, None]:
    """The kernel Module from the first of `paths` that holds its symbols; None when no file does;
    a sentence when one does but its kernel is not in memory (not booted yet: the reset vector
    under `qemu -S`, or another build's symbols). Tables the symbols do not give are absent."""
    for path in paths:
        symbols = file_symbols(path)
        if "__start_orc_unwind_ip" in symbols:
            slide = find_slide(symbols, read)
            if slide is None:
                return ("%s has the kernel's symbols, but linux_banner does not read \"Linux version\" at "
                        "any KASLR slide: the kernel is not running yet, or is another build" % path)
            return kernel_module(path, symbols, slide, read, arch)
    return None


def kernel_module(path: str, symbols: Dict[str, int], slide: int, read: Read, arch) -> Module:
    """The kernel at its place in memory: the symbols plus KASLR's slide."""
    problems: List[str] = []
    if slide:
        problems.append("KASLR: the kernel runs 0x%x above %s's symbols; give GDB `symbol-file %s -o 0x%x`"
                        % (slide, os.path.basename(path), path, slide))
    at = {name: value + slide for name, value in symbols.items()}
    module = Module(KERNEL_NAME, path, at.get("_text", at.get("_stext", 0)), arch, format=ModuleFormat.KERNEL,
                    load_bias=slide, problems=problems)
    for start, end in (("_stext", "_etext"), ("_sinittext", "_einittext")):
        if start in at and end in at and at[start] < at[end]:
            module.segments.append(Segment(at[start], at[end], True))
    found_by = "the symbols __start_/__stop_%s of " + os.path.basename(path) + (
        " (KASLR slide 0x%x)" % slide if slide else "")
    for section, start, stop in ((".orc_unwind_ip", "__start_orc_unwind_ip", "__stop_orc_unwind_ip"),
                                 (".orc_unwind", "__start_orc_unwind", "__stop_orc_unwind"),
                                 (".orc_header", "__start_orc_header", "__stop_orc_header")):
        if start in at and stop in at and at[start] <= at[stop]:
            module.tables[section] = TableLocation(section, at[start], at[stop] - at[start],
                                                   found_by % section.lstrip("."))
    banner = at.get("linux_banner")
    module.cache["kernel release"] = _release(read, banner) if banner is not None else None
    module.cache["module list"] = at.get("modules")
    module.cache["ftrace"] = {name: at[name] for name in FTRACE_NAMES if name in at}
    return module


# Dynamic ftrace trampolines (arch/x86/kernel/ftrace.c, create_trampoline): a copy of ftrace_caller's or
# ftrace_regs_caller's code (up to its _end) in the module area, with no ORC entry of its own. The
# kernel's unwinder (orc_ftrace_find) looks a pc there up at the same offset in the code it was copied
# from. The trampolines hang off the ftrace_ops on ftrace_ops_list (each ops' `next` 8 bytes in, the
# list ending at ftrace_list_end); where `trampoline` and `trampoline_size` lie in struct ftrace_ops
# depends on the configuration: the first 8-aligned place holding a module-area address and a size
# below 4 KiB whose code begins as one of the two callers' does.
FTRACE_NAMES = ("ftrace_ops_list", "ftrace_list_end", "ftrace_caller", "ftrace_caller_end",
                "ftrace_regs_caller", "ftrace_regs_caller_end")
FTRACE_OPS_SCAN = 0x200         # bytes of struct ftrace_ops looked through for the trampoline's fields
MAX_FTRACE_OPS = 64
SAME_START = 16                 # bytes a trampoline shares with the code it was copied from


class Trampoline(NamedTuple):
    """A dynamic ftrace trampoline: where it is, and the code it is a copy of."""
    start: int
    size: int
    copied: int         # the address of the code it copies
    first: bytes        # the SAME_START bytes it begins with, as that code does


def ftrace_trampolines(kernel: Module, read: Read) -> List[Trampoline]:
    """The dynamic ftrace trampolines on the kernel's ftrace_ops_list."""
    at = kernel.cache.get("ftrace") or {}
    if any(name not in at for name in FTRACE_NAMES):
        return []
    out: List[Trampoline] = []
    try:
        originals = [(at[name], at[name + "_end"] - at[name], read(at[name], SAME_START))
                     for name in ("ftrace_caller", "ftrace_regs_caller")]
        node = _u64(read(at["ftrace_ops_list"], 8))
        seen = 0
        while node and node != at["ftrace_list_end"] and seen < MAX_FTRACE_OPS:
            seen += 1
            found = _trampoline_of(read(node, FTRACE_OPS_SCAN), originals, read)
            if found is not None:
                out.append(found)
            node = _u64(read(node + 8, 8))
    except (MemoryReadError, OSError, ValueError, struct.error):
        pass
    return out


def still_there(trampoline: Trampoline, read: Read) -> bool:
    """Does the trampoline's code still begin as the code it copies (it is not freed, nor its memory
    given to other code)?"""
    try:
        return read(trampoline.start, SAME_START) == trampoline.first
    except (MemoryReadError, OSError, ValueError):
        return False


def _trampoline_of(block: bytes, originals, read: Read) -> Optional[Trampoline]:
    for offset in range(16, len(block) - 8, 8):
        start, size = struct.unpack_from("<QQ", block, offset)
        if not _in_area(start) or not 0 < size < 0x1000:
            continue
        try:
            code = read(start, SAME_START)
        except (MemoryReadError, OSError, ValueError):
            continue
        for address, length, first in originals:
            if code == first:
                return Trampoline(start, min(size, length), address, first)
    return None


# Loaded kernel modules: the list at `modules` links each struct module by its `list`, 8 bytes
# in (after `enum module_state state`), its name 24 bytes in (char name[56]). Where x86's
# struct mod_arch_specific (unsigned int num_orcs; int *orc_unwind_ip; struct orc_entry
# *orc_unwind) lies in it depends on the build's configuration, and there are no type facts
# without debug information: it is the first 8-aligned place where a count is followed by two
# pointers into the module area whose first and last ips fall there too, in order.
MODULE_AREA = (0xFFFFFFFFA0000000, 0xFFFFFFFFFF000000)
STRUCT_MODULE_SCAN = 0x800          # bytes of struct module looked through for its ORC fields
ORC_FIELDS = "orc fields"    # module.cache: (offset in struct module, the bytes of num_orcs, orc_unwind_ip, orc_unwind)
MAX_MODULES = 1024
MODULE_NAME_END = 24 + 56       # struct module's `char name[56]` ends here


def loaded_modules(kernel: Module, read: Read, known: Optional[Dict[Tuple[str, int], Module]] = None) -> List[Module]:
    """The kernel modules on the kernel's module list, each with its ORC tables (none found: left
    out). known: modules found before, by (name, struct module address); one at the same address
    under the same name is taken as it is (its struct is not searched again for its tables)."""
    head = kernel.cache.get("module list")
    out: List[Module] = []
    if head is None:
        return out
    try:
        node = _u64(read(head, 8))
        while node != head and len(out) < MAX_MODULES and MODULE_AREA[0] <= node < MODULE_AREA[1]:
            start = read(node - 8, MODULE_NAME_END)       # one read: the list's next pointer and the name
            name = _name_in(start)
            found = known.get(("[%s]" % name, node - 8)) if known else None
            if found is None or not _same_tables(found, read):
                found = _module_at(node - 8, name, kernel, read)
            if found is not None:
                out.append(found)
            node = _u64(start[8:16])
    except (MemoryReadError, OSError, ValueError, struct.error):
        pass
    return out


def _u64(data: bytes) -> int:
    return struct.unpack("<Q", data)[0]


def _in_area(address: int) -> bool:
    return MODULE_AREA[0] <= address < MODULE_AREA[1]


def _same_tables(module: Module, read: Read) -> bool:
    """Does the struct module a module was found at still give the same ORC tables (count and
    addresses, which the same allocation of its code and tables keeps)?"""
    offset, fields = module.cache.get(ORC_FIELDS, (None, None))
    return offset is not None and read(module.header_address + offset, len(fields)) == fields


def _name_in(start: bytes) -> str:
    """The name in a struct module's first MODULE_NAME_END bytes."""
    return start[24:MODULE_NAME_END].split(b"\0", 1)[0].decode("ascii", "replace")


def _module_at(address: int, name: str, kernel: Module, read: Read) -> Optional[Module]:
    block = read(address, STRUCT_MODULE_SCAN)
    for offset in range(0x40, STRUCT_MODULE_SCAN - 24, 8):
        count, pad, ips, entries = struct.unpack_from("<IIQQ", block, offset)
        if not 0 < count < 1 << 20 or pad or not _in_area(ips) or not _in_area(entries) or ips % 4:
            continue
        if not _apart((address, STRUCT_MODULE_SCAN), (ips, 4 * count), (entries, orc.ENTRY_SIZE * count)):
            continue        # a table inside the struct itself, or the two tables overlapping
        try:
            first, last = _sorted_ips(ips, count, read)
        except (MemoryReadError, OSError, ValueError):
            continue
        if not (_in_area(first) and first <= last < first + (64 << 20)):
            continue
        found_by = "struct module %s at 0x%x (num_orcs at +0x%x)" % (name, address, offset)
        module = Module("[%s]" % name, None, address, kernel.arch, format=ModuleFormat.KERNEL,
                        segments=[Segment(first, last + 1, True)])
        module.tables[".orc_unwind_ip"] = TableLocation(".orc_unwind_ip", ips, 4 * count, found_by)
        module.tables[".orc_unwind"] = TableLocation(".orc_unwind", entries, orc.ENTRY_SIZE * count, found_by)
        module.cache["kernel release"] = kernel.cache.get("kernel release")
        module.cache[ORC_FIELDS] = (offset, block[offset:offset + 24])
        return module
    return None


def _apart(*areas: Tuple[int, int]) -> bool:
    """Do the (start, size) areas not overlap?"""
    ordered = sorted(areas)
    return all(a + size <= b for (a, size), (b, _) in zip(ordered, ordered[1:]))


SORT_SAMPLE = 64        # ips of a candidate table checked in order (the kernel sorts a module's table at load)


def _sorted_ips(ips: int, count: int, read: Read) -> Tuple[int, int]:
    """(first, last) ip of a candidate ip table; ValueError unless its first SORT_SAMPLE ips and its last
    are in order, as the kernel leaves them (unwind_module_init sorts the table)."""
    sample = min(count, SORT_SAMPLE)
    raw = struct.unpack("<%di" % sample, read(ips, 4 * sample))
    decoded = [ips + 4 * i + rel for i, rel in enumerate(raw)]
    last_at = ips + 4 * (count - 1)
    decoded.append(last_at + struct.unpack("<i", read(last_at, 4))[0])
    if any(a > b for a, b in zip(decoded, decoded[1:])):
        raise ValueError("not in order")
    return decoded[0], decoded[-1]


def orc_table(module: Module, read: Read) -> Tuple[orc.OrcTable, orc.LayoutFoundBy, List[str]]:
    """The module's ORC table over read (a page cache: the tables never change), its layout chosen
    by .orc_header, else the kernel's release, else the first page of entries' bits.
    DecodeError when the tables are missing or disagree; MemoryReadError when unreadable."""
    ips, entries = module.tables.get(".orc_unwind_ip"), module.tables.get(".orc_unwind")
    if ips is None or entries is None:
        raise DecodeError(".orc_unwind", None, "the kernel's symbols do not give both ORC tables",
                          DecodeKind.MALFORMED)
    count = orc.check_sizes(ips.size, entries.size)
    header_at = module.tables.get(".orc_header")
    header = read(header_at.address, header_at.size) if header_at is not None else None
    sample = read(entries.address, min(entries.size, 4096 - 4096 % orc.ENTRY_SIZE))
    layout, found_by, notes = orc.choose_layout(header, module.cache.get("kernel release"), orc.all_flags(sample))
    return orc.OrcTable(ips.address, entries.address, count, layout, read), found_by, notes
