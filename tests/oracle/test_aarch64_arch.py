"""The aarch64 architecture layer: register names, pointer authentication.

Oracles: GDB's own aarch64 register table (gdb-multiarch `maint print
registers`), and the Armv8.3 rule for a 48-bit virtual address: a signed
pointer keeps its low 48 bits, and bit 55 says whether the top is zeros
(user) or ones (kernel).
"""

import re

from plugin import arch as arches
from plugin.engine import UnwindContext
from plugin.model.evidence import Frame, StepEvidence
from plugin.formats.cfi import CfiSection, execute, row_at
from plugin.model.outcome import AttemptStatus
from plugin.strategies.row_step import step_with_row
from plugin.target import SnapshotTarget
from support import need_tool, run
from cfi_builder import Builder

A64 = arches.BY_NAME["aarch64"]


def test_dwarf_numbers_name_gdbs_registers():
    gdb = need_tool("gdb-multiarch")
    out = run([gdb, "-nx", "-q", "-batch", "-ex", "set architecture aarch64",
               "-ex", "maint print registers"]).stdout
    table = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\w+)\s+(\d+)\s+\d+", line)
        if match:
            table[match.group(1)] = int(match.group(2))
    # GDB numbers x0..x30, sp, pc as 0..32: the same as DWARF for these.
    for number in range(33):
        assert table[A64.name_of(number)] == number, A64.name_of(number)
    assert (A64.sp, A64.fp, A64.ra, A64.pc) == (31, 29, 30, 32)
    assert A64.number_of("lr") == 30 and A64.number_of("fp") == 29
    assert arches.by_name("aarch64") is A64      # pending_frame.architecture().name() under qemu


def test_strip_pointer_auth():
    user = 0x0000_0055_0080_1234
    assert A64.strip_pointer_auth(user) == user
    assert A64.strip_pointer_auth(user | 0x003F_0000_0000_0000) == user        # PAC in bits 48-54
    assert A64.strip_pointer_auth(user | 0x7F3F_0000_0000_0000) == user        # and TBI byte
    kernel = 0xFFFF_8000_1000_0000
    assert A64.strip_pointer_auth(0x00BF_8000_1000_0000) == kernel              # bit 55 set: ones
    assert arches.BY_NAME["x86_64"].strip_pointer_auth(0x1234 | 1 << 60) == 0x1234 | 1 << 60


def _negate_ra_fde():
    """paciasp; stp x29, x30, [sp, -16]!; ... as CFI: negate_ra_state after the first instruction."""
    b = Builder(address=0x10000)
    cie = b.cie(bytes([0x0C, 31, 0]), code_align=4, data_align=-8, ra=30)     # CFA = sp
    program = bytes([0x41, 0x2D,             # advance 1 insn; DW_CFA_AARCH64_negate_ra_state
                     0x41, 0x0E, 16,         # advance 1; def_cfa_offset 16
                     0x9D, 2, 0x9E, 1])      # x29 at CFA-16, x30 at CFA-8
    b.fde(cie, 0x400000, 0x40, program)
    return CfiSection(b.region(), "eh_frame", A64).fdes()[0]


def test_negate_ra_state_marks_rows_signed():
    fde = _negate_ra_fde()
    rows = execute(fde, A64)
    assert [(r.address, r.ra_signed) for r in rows] == [(0x400000, False), (0x400004, True),
                                                        (0x400008, True)]
    assert row_at(fde, 0x400010, A64).ra_signed


def test_signed_return_address_from_cfi_is_stripped():
    sp = 0x7f0000
    caller = 0x400800
    signed = caller | 0x0041_0000_0000_0000
    stack = (0x7f0100).to_bytes(8, "little") + signed.to_bytes(8, "little")
    target = SnapshotTarget(arch=A64, regions=[(sp, stack)])
    row = row_at(_negate_ra_fde(), 0x400010, A64)
    frame = Frame(level=0, pc=0x400010, registers={A64.pc: 0x400010, A64.sp: sp, 30: 0x1},
                  method="context", exact_pc=True)
    evidence = StepEvidence(source="cfi", found_by="test", lookup_pc=0x400010)
    outcome = step_with_row(row, frame, UnwindContext(target), evidence)
    assert outcome.status == AttemptStatus.RECOVERED
    assert outcome.registers[A64.pc] == caller
    assert outcome.registers[29] == 0x7f0100 and outcome.registers[A64.sp] == sp + 16
    assert any("pointer-auth bits stripped" in n for n in evidence.notes)
