"""readelf's listings of a file's CFI, read for the table sweep (sweep_tables.py).

readelf_tables reads `--debug-dump=frames-interp`: every FDE's rows. self_restoring
reads the raw `--debug-dump=frames` for a difference the sweep knows and counts
instead of failing on:

A CIE whose own initial instructions hold DW_CFA_restore (seen in NVIDIA's
libnvvm.so and cicc: a CIE saves rbx, rbp, r12-r15, then restores them).
DW_CFA_restore gives a register "the rule the CIE's initial instructions
assigned", which does not exist yet while those instructions run. GDB
(dwarf2/frame.c, its restore rule) and the plugin leave the register with
no rule. readelf's interpretation keeps the rule the CIE set before the
restore. llvm-dwarfdump prints no row for such an FDE. So the FDEs of such
a CIE are found in readelf's raw listing (`--debug-dump=frames`) and counted,
not compared.
"""
from __future__ import annotations

import re
import subprocess
from typing import Dict, Set, Tuple

READELF_ENTRY = re.compile(r"([0-9a-f]{8,}) [0-9a-f]+ [0-9a-f]+ (CIE|FDE)( cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))?")
READELF_ROW = re.compile(r"([0-9a-f]{16}) (?![0-9a-f]{8} )(\S+)\s*(.*)$")     # not an entry's head
READELF_REGISTER = re.compile(r"\br\d+ \((\w+)\)")
RESTORES = ("DW_CFA_restore:", "DW_CFA_restore_extended:")     # not DW_CFA_restore_state


def readelf_tables(text):
    """{section: {(start, end): [(address, cfa, {column: rule})]}} from frames-interp
    (columns whose rule is "u", undefined, left out)."""
    out, section, cies, current, columns = {}, None, {}, None, []
    for line in text.splitlines():
        row = READELF_ROW.match(line)
        if row:
            if current is not None:
                # A register rule is printed "r11 (r11)": number and name; keep the name.
                rules = row.group(3)
                values = (READELF_REGISTER.sub(r"\1", rules) if "(" in rules else rules).split()
                current.append((int(row.group(1), 16), row.group(2),
                                {c: v for c, v in zip(columns, values) if v != "u"}))
            continue
        if line.startswith("Contents of the "):
            section, cies, current = line.split()[3].rstrip(":"), {}, None
            out.setdefault(section, {})
            continue
        entry = READELF_ENTRY.match(line)
        if entry:
            if entry.group(2) == "CIE":
                current = cies.setdefault(int(entry.group(1), 16), [])
            else:
                key = (int(entry.group(5), 16), int(entry.group(6), 16))
                if key in out[section]:
                    current = []            # a second FDE with the same range: the first one counts
                else:
                    current = out[section][key] = [("cie", int(entry.group(4), 16), cies)]
            continue
        if line.strip().startswith("LOC"):
            columns = line.split()[2:]
    return {name: {key: _readelf_rows(key, rows) for key, rows in fdes.items()} for name, fdes in out.items()}


def _readelf_rows(key, rows):
    start, end = key
    marker, rows = rows[0], rows[1:]
    if not rows:
        cie_rows = marker[2].get(marker[1]) or []
        rows = [(start, cfa, regs) for _, cfa, regs in cie_rows[:1]]
    return merged([row for row in rows if row[0] < end])


def merged(rows):
    """rows with each row that changes nothing after the one before it left out (readelf's way)."""
    out = []
    for row in rows:
        if not out or out[-1][1:] != row[1:]:
            out.append(row)
    return out


def self_restoring(listing: str) -> Dict[str, Set[Tuple[int, int]]]:
    """{section: {(start, end) of each FDE whose CIE restores a register in its own
    instructions}} from readelf's raw listing (`--debug-dump=frames`)."""
    restoring, fdes = set(), []
    section, cie = None, None
    for line in listing.splitlines():
        if line.startswith("Contents of the "):
            section, cie = line.split()[3].rstrip(":"), None
            continue
        entry = READELF_ENTRY.match(line)
        if entry:
            cie = (section, int(entry.group(1), 16)) if entry.group(2) == "CIE" else None
            if entry.group(2) == "FDE":
                fdes.append((section, int(entry.group(4), 16), int(entry.group(5), 16), int(entry.group(6), 16)))
            continue
        if cie is not None and line.strip().startswith(RESTORES):
            restoring.add(cie)
    out: Dict[str, Set[Tuple[int, int]]] = {}
    for section, pointer, start, end in fdes:
        if (section, pointer) in restoring:
            out.setdefault(section, set()).add((start, end))
    return out


def self_restoring_fdes(path: str, timeout: float) -> Dict[str, Set[Tuple[int, int]]]:
    """self_restoring() of the file's readelf listing; {} if readelf fails."""
    try:
        proc = subprocess.run(["readelf", "--debug-dump=frames", path], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return self_restoring(proc.stdout.decode(errors="replace"))
