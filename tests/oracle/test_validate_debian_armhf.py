"""Offline `validate` on Debian 12's own armhf binaries (issue 33, items 5 and 6).

tests/setup_debian_sysroots.sh unpacks them. Debian's libc and ld.so are
Thumb-2 with .ARM.exidx (no CFI); their static functions have no symbol, so
the instruction set of each comes from its neighbours or its code
(plugin.analysis.instruction_sets). The oracles: readelf's own list of the
index (how many entries, how many CANTUNWIND), and the symbols' Thumb bit
for the instruction sets. Every row judged must be right or undecided, the
undecided ones few and where the code itself loses a register.
"""

import re
import subprocess

import pytest

from debian_sysroot import sysroot
from support import need_tool
from validate_support import validate

LIBC = "lib/arm-linux-gnueabihf/libc.so.6"
LOADER = "lib/ld-linux-armhf.so.3"
PROGRAMS = ("usr/bin/sort", "bin/ls", "bin/bash", "usr/bin/python3.11")


def _index(path):
    """(entries, CANTUNWIND entries) of the .ARM.exidx, as readelf -u lists them."""
    out = subprocess.run([need_tool("arm-linux-gnueabihf-readelf"), "-u", str(path)], capture_output=True,
                         text=True, check=True).stdout
    entries = [line for line in out.splitlines() if re.match(r"^0x[0-9a-f]+: ", line)]
    return len(entries), sum(1 for line in entries if "cantunwind" in line)


@pytest.mark.parametrize("name, least", [(LIBC, 3900), (LOADER, 90)])
def test_debian_armhf_libraries_have_no_wrong_ehabi_row(name, least):
    path = sysroot("armhf") / name
    report = validate(path)
    exidx = report["sources"]["exidx"]
    entries, cantunwind = _index(path)
    print("%s: %d index entries (%d CANTUNWIND); %d functions; exidx %s" % (
        name, entries, cantunwind, report["functions"], exidx))
    assert report["functions"] <= entries - cantunwind
    assert exidx["wrong"] == 0 and report["disagreements"] == [], report["disagreements"][:3]
    assert exidx["checked"] >= least and exidx["unknown"] <= 5, exidx


@pytest.mark.parametrize("name", PROGRAMS)
def test_debian_armhf_programs_have_nothing_to_check(name):
    """C programs built for armhf without -funwind-tables: one index entry (_start's, CANTUNWIND)."""
    path = sysroot("armhf") / name
    assert _index(path) == (1, 1)
    report = validate(path)
    assert report["functions"] == 0 and report["sources"].get("exidx", {}).get("checked", 0) == 0, report


def _functions(path):
    """{start: (end, thumb)} of the FUNC symbols readelf lists (bit 0 of the value: Thumb)."""
    out = subprocess.run([need_tool("arm-linux-gnueabihf-readelf"), "-W", "--dyn-syms", str(path)],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "FUNC" and parts[6] != "UND" and int(parts[2]) >= 12:
            value = int(parts[1], 16)
            found[value & ~1] = (value - (value & 1) + int(parts[2]), bool(value & 1))
    return found


def test_instruction_sets_of_nameless_functions_agree_with_the_symbols():
    """Half of libc's named functions shown to instruction_sets without their symbol: each is coded
    as its neighbour, and with no symbol at all as its code looks; readelf's Thumb bit is the oracle."""
    from plugin.analysis import instruction_sets
    from plugin.file_targets import load
    path = sysroot("armhf") / LIBC
    target, modules = load(str(path))
    truth = _functions(path)
    starts = sorted(truth)
    shown = set(starts[::2])

    def symbol(address):
        start = address & ~1
        return ("f", start | truth[start][1]) if start in shown else None

    functions = {s: truth[s][0] for s in starts}
    for hide_all in (False, True):
        sets = instruction_sets(target.arch, functions, (lambda a: None) if hide_all else symbol,
                                target.read_memory)
        coded = {s: thumb for thumb, subset in sets.items() for s in subset}
        hidden = [s for s in starts if hide_all or s not in shown]
        right = sum(1 for s in hidden if coded[s] == truth[s][1])
        print("hide %s: %d of %d right" % ("all" if hide_all else "half", right, len(hidden)))
        assert right >= 0.99 * len(hidden)


@pytest.mark.parametrize("name, calls", [("librt.so.1", 4), ("libstdc++.so.6", 300)])
def test_a_call_through_the_plt_of_a_function_that_never_returns_ends_its_path(name, calls):
    """Debian's armhf cross libraries (/usr/arm-linux-gnueabihf/lib): ld merges the equal .ARM.exidx
    entries of neighbouring functions, so one entry covers a function that ends in `blx
    __libc_fatal@plt` (or __cxa_throw@plt), its literal pool, and the next function. Read on past
    the call, the literal words decoded as instructions carried the first function's frame into the
    next: 4 (librt) and 392 (libstdc++) rows reported wrong that are right. The PLT entry's words
    name the GOT slot whose relocation names the callee (plugin/analysis/arm_plt.py), and a callee
    that never returns ends the path. Oracle for the callees: objdump's <NAME@plt> call targets."""
    path = "/usr/arm-linux-gnueabihf/lib/" + name
    dump = subprocess.run([need_tool("arm-linux-gnueabihf-objdump"), "-d", path], capture_output=True,
                          text=True, check=True).stdout
    noreturn = re.findall(r"\tblx?\t[0-9a-f]+ <(__libc_fatal|__cxa_throw|abort|_ZSt\w*__throw_\w*)@plt>", dump)
    assert len(noreturn) >= calls
    report = validate(path)
    assert report["sources"]["exidx"]["wrong"] == 0, report["disagreements"][:3]
    assert report["sources"]["exidx"]["right"] >= 7
