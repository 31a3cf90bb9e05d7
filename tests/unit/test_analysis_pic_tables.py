"""i386 PIC jump tables (plugin.analysis.x86_tables.relative_entry): glibc's hand-written string functions
branch through `call __x86.get_pc_thunk.bx; add $(table - .), %ebx; add (%ebx,%ecx,4), %ebx; jmp *%ebx`,
a table of offsets relative to its own address.

The code is assembled by GNU as (--32); nm gives the labels' addresses, the oracle for the targets.
Right after the table lies a second table whose entry, misread as entry 3 of the first, names `out`
(an instruction of the function no case reaches through the table): reading one entry too many
(`cmp $3, %ecx; jae` leaves ecx <= 2) would add it.
"""

import subprocess

from plugin.analysis import CodeAnalysis
from plugin.arch import BY_NAME

BASE = 0x1000
SOURCE = """
    .text
f:  push %ebx
    mov 8(%esp), %ecx
    {check}
    call thunk
1:  add $(table - 1b), %ebx
    add (%ebx,%ecx,4), %ebx
jump: jmp *%ebx
case0: mov $1, %eax
    pop %ebx
    ret
case1: mov $2, %eax
    pop %ebx
    ret
case2: mov $3, %eax
out: pop %ebx
    ret
f_end:
thunk: mov (%esp), %ebx
    ret
thunk_end:
table: .long case0 - table, case1 - table, case2 - table
table2: .long out + 12 - table2
"""


def assemble(tmp_path, check):
    (tmp_path / "t.s").write_text(SOURCE.format(check=check))
    subprocess.run(["as", "--32", str(tmp_path / "t.s"), "-o", str(tmp_path / "t.o")], check=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(tmp_path / "t.o"), str(tmp_path / "t.bin")],
                   check=True)
    labels = {}
    for line in subprocess.run(["nm", str(tmp_path / "t.o")], capture_output=True, text=True,
                               check=True).stdout.split("\n"):
        if line.strip():
            value, _, name = line.split()
            labels[name] = BASE + int(value, 16)
    return (tmp_path / "t.bin").read_bytes(), labels


def analyse(tmp_path, check):
    code, labels = assemble(tmp_path, check)

    def read(address, size):
        offset = address - BASE
        if offset < 0 or offset + size > len(code):
            raise ValueError("outside the code")
        return code[offset:offset + size]
    functions = [(labels["f"], labels["f_end"]), (labels["thunk"], labels["thunk_end"])]
    analysis = CodeAnalysis(BY_NAME["i386"], read, functions)
    return analysis.function(labels["f"], labels["f_end"]), labels


def test_a_compared_index_reads_exactly_the_cases(tmp_path):
    result, labels = analyse(tmp_path, "cmp $3, %ecx\n    jae out")
    cases = tuple(labels[c] for c in ("case0", "case1", "case2"))
    assert result.tables[labels["jump"]] == (labels["table"], 3, True, cases)
    assert not result.unresolved and not result.assumed
    assert all(c in result.states for c in cases)
    state = result.states[labels["case1"]]
    assert state.reg(BY_NAME["i386"].sp) == result.states[labels["jump"]].reg(BY_NAME["i386"].sp)


def test_a_masked_index_is_bounded(tmp_path):
    result, labels = analyse(tmp_path, "and $2, %ecx")
    _, entries, bounded, targets = result.tables[labels["jump"]]
    assert (entries, bounded) == (3, True) and labels["out"] not in targets
    assert not result.assumed


def test_an_unbounded_index_reaches_code_only_assumed(tmp_path):
    result, labels = analyse(tmp_path, "")
    _, _, bounded, targets = result.tables[labels["jump"]]
    assert not bounded and labels["case1"] in targets
    assert labels["case1"] in result.states and labels["case1"] in result.assumed
    assert labels["f"] not in result.assumed
