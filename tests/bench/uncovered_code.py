"""Measurement (not a test): how much code of real processes no table GDB reads covers.

    .venv/bin/python tests/bench/uncovered_code.py [PROGRAM ...]

For each program (default: a few Debian programs) and every shared library
it loads (ldd), the executable sections (readelf -S, flag X) minus the
ranges of the FDEs in .eh_frame and .debug_frame (readelf --debug-dump=frames,
the oracle; .debug_frame of a separate debug file is not looked at), less
alignment padding (only nops and int3, decoded by capstone). Prints
per file the uncovered bytes, which sections they are in, and the symbols
(readelf -s / --dyn-syms) that start there. Under `claim auto` the plugin may
add a frame only where a pc lies in such code (or in a module or table GDB
does not read): a process whose files have none is the "nothing can be
added" case of issue 31 item 4.
"""
from __future__ import annotations

import re
import subprocess
import sys

import capstone

DEFAULT = ["/usr/bin/sleep", "/usr/bin/ls", "/usr/bin/bash", "/usr/bin/python3", "/usr/bin/perl", "/usr/bin/gdb"]
SECTION = re.compile(r"^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+\S+\s+(\S*)")
FDE = re.compile(r"\bFDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)")
SYMBOL = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+FUNC\s+\S+\s+\S+\s+\S+\s+(\S+)")


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, errors="replace").stdout


def libraries(program):
    out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    found = re.findall(r"(/\S+) \(0x", out)
    return [path for path in found if path != program]


def _padding(data, address):
    """Are these bytes alignment padding (nothing but nops and int3, as capstone decodes them)?"""
    decoder = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    seen = 0
    for insn in decoder.disasm(data, address):
        if insn.mnemonic not in ("nop", "int3", "xchg") or insn.mnemonic == "xchg" and insn.op_str != "ax, ax":
            return False
        seen += insn.size
    return seen == len(data)


_CACHE = {}


def uncovered(path):
    """[(section, start, end)] of executable bytes in no FDE, alignment padding left out."""
    if path in _CACHE:
        return _CACHE[path]
    sections = [(m.group(1), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4), 16))
                for m in map(SECTION.match, readelf("-S", path).splitlines()) if m and "X" in m.group(5)]
    fdes = sorted((int(a, 16), int(b, 16)) for a, b in FDE.findall(readelf("--debug-dump=frames", path)))
    with open(path, "rb") as handle:
        image = handle.read()
    gaps = []
    for name, start, offset, size in sections:
        at, end = start, start + size
        for low, high in fdes:
            if high <= at or low >= end:
                continue
            if low > at:
                gaps.append((name, at, low, offset - start))
            at = max(at, high)
        if at < end:
            gaps.append((name, at, end, offset - start))
    out = _CACHE[path] = [(n, a, b) for n, a, b, delta in gaps
                          if not _padding(image[a + delta:b + delta], a)]
    return out


def symbols_in(path, gaps):
    found = set()
    for line in (readelf("-s", path) + readelf("--dyn-syms", path)).splitlines():
        m = SYMBOL.match(line)
        if m:
            address = int(m.group(1), 16)
            if any(a <= address < b for _, a, b in gaps):
                found.add(m.group(2).split("@")[0])
    return sorted(found)


def main():
    programs = sys.argv[1:] or DEFAULT
    seen = set()
    for program in programs:
        files = [program] + libraries(program)
        total = 0
        print(program)
        for path in files:
            gaps = uncovered(path)
            size = sum(b - a for _, a, b in gaps)
            total += size
            if path not in seen:
                seen.add(path)
                where = {}
                for name, a, b in gaps:
                    where[name] = where.get(name, 0) + b - a
                print("  %-46s %6d bytes in %d ranges (%s); symbols there: %s"
                      % (path, size, len(gaps), ", ".join("%s %d" % item for item in sorted(where.items())) or "-",
                         ", ".join(symbols_in(path, gaps)[:6]) or "- (no symbol table)"))
        print("  the process: %d files, %d with uncovered code, %d bytes" % (
            len(files), sum(1 for p in files if uncovered(p)), total))


if __name__ == "__main__":
    main()
