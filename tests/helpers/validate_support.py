"""The planted-error fixtures of `validate`, shared by the offline and the live tests.

Where each planted error lies is read from the assembler's own symbols
(bad_N_begin / bad_N_end, with nm) and the instruction list from objdump:
tools this project did not write.
"""

import hashlib
import re
import json
import subprocess
import sys

import pytest

from support import BUILD, FIXTURES, ROOT, build, need_tool

PLANTED = "validate_planted.S"
LIVE_MAIN = "validate_planted_main.c"
# Each call validate_planted_main.c makes, in order: (function, planted errors its path goes through).
LIVE_CALLS = (("missing_adjust", (1,)), ("wrong_after_leave", (2,)), ("wrong_save", (3,)),
              ("early_return", (4,)), ("early_return", ()), ("realigned", ()))
LIVE_CALLS_AARCH64 = (("missing_adjust", (1,)), ("wrong_after_epilogue", (2,)), ("wrong_save", (3,)),
                      ("early_return", (4,)), ("early_return", ()))
A64 = "aarch64-linux-gnu-"
SFRAME_CANNOT_SAY = (3,)        # SFrame has no rule for rbx: mistake 3 cannot show in it


def labels(path, nm_name="nm"):
    nm = need_tool(nm_name)
    out = subprocess.run([nm, str(path)], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3}


def instructions(path, objdump_name="objdump"):
    """Instruction addresses, as objdump decodes them."""
    objdump = need_tool(objdump_name)
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        head, colon, rest = line.partition(":")
        if colon and rest.strip() and head.strip() and all(c in "0123456789abcdef" for c in head.strip()):
            found.append(int(head.strip(), 16))
    return found


def planted_and_twin(source, flags):
    """Module-scoped fixtures (planted, twin): tests/fixtures/SOURCE built with FLAGS, and with -DCORRECT."""
    stem = source.rsplit(".", 1)[0]

    @pytest.fixture(scope="module")
    def planted():
        return build(source, flags)

    @pytest.fixture(scope="module")
    def twin():
        return build(source, list(flags) + ["-DCORRECT"], name=stem + "_correct")
    return planted, twin


def planted_ranges(path, numbers, prefix=""):
    names = labels(path, prefix + "nm")
    addresses = instructions(path, prefix + "objdump")
    return sorted(a for n in numbers for a in addresses
                  if names["bad_%d_begin" % n] <= a < names["bad_%d_end" % n])


def live_program(correct, aarch64=False):
    """(program with the bad_N labels, the same program without local symbols) for the live tests.

    Debuggers take a label inside a function for a function of its own, so
    the program run has its local symbols discarded; the layout is the same,
    so the labels of the first locate the planted errors in the second.
    aarch64: a static program for qemu-aarch64, from validate_planted_aarch64.S.
    """
    source = "validate_planted_aarch64.S" if aarch64 else PLANTED
    digest = hashlib.sha256((FIXTURES / source).read_bytes()
                            + (FIXTURES / LIVE_MAIN).read_bytes()).hexdigest()[:8]
    # -no-pie / -static: the link addresses nm prints are the addresses the program runs at
    flags = [str(FIXTURES / source), "-O1", "-static" if aarch64 else "-no-pie", "-Wa,--gsframe"]
    flags += ["-DCORRECT"] if correct else []
    name = "validate_live_%s%s_%s" % ("twin" if correct else "planted", "_aarch64" if aarch64 else "", digest)
    prefix = A64 if aarch64 else ""
    labelled = build(LIVE_MAIN, flags, name=name, compiler=need_tool(prefix + "gcc"))
    return labelled, without_labels(labelled, need_tool(prefix + "objcopy"))


def without_labels(labelled, objcopy):
    """A copy of the program without its local symbols (a debugger would take a label for a
    function), made once beside it."""
    bare = BUILD / (labelled.name + "-bare")
    if not bare.exists():
        tmp = bare.with_suffix(".tmp")
        subprocess.run([objcopy, "--discard-all", str(labelled), str(tmp)], check=True)
        tmp.rename(bare)
    return bare


def wrong_by_source(report):
    """source -> sorted wrong addresses, from a live report's JSON."""
    return {source: sorted(tally["wrong"]) for source, tally in report["sources"].items()}


def run_validate(*argv):
    """`python -m plugin validate ARGV...`, finished (CompletedProcess, text)."""
    return subprocess.run([sys.executable, "-m", "plugin", "validate", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def validate(path, *extra):
    """The first module's report of `python -m plugin validate PATH --json`."""
    out = run_validate(path, "--json", *extra)
    assert out.returncode in (0, 1), out.stderr
    assert out.returncode == (1 if '"source"' in out.stdout else 0)
    return json.loads(out.stdout)["modules"][0]


def wrong(report, source):
    return sorted({d["address"] for d in report["disagreements"] if d["source"] == source})


def objdump_lines(path, function):
    """[(address, text)] of function's instructions, as objdump decodes them (an oracle)."""
    out = subprocess.run([need_tool("objdump"), "-d", "--no-show-raw-insn", str(path)], capture_output=True,
                         text=True, check=True).stdout
    body = out.split("<%s>:\n" % function, 1)[1].split("\n\n", 1)[0]
    return [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"^\s*([0-9a-f]+):\s*(.*)$", body, re.M)]


def readelf_cfa(path, address):
    """The CFA rule readelf -wF gives at address (the row in force there), e.g. "esp+8"."""
    out = subprocess.run([need_tool("readelf"), "-wF", str(path)], capture_output=True, text=True,
                         check=True).stdout
    found = None
    for fde in out.split("FDE ")[1:]:
        m = re.search(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", fde)
        if m and int(m.group(1), 16) <= address < int(m.group(2), 16):
            for row in re.finditer(r"^([0-9a-f]{8}|[0-9a-f]{16}) ([a-z]+[+-][0-9]+) ", fde, re.M):
                if int(row.group(1), 16) <= address:
                    found = row.group(2)
    return found
