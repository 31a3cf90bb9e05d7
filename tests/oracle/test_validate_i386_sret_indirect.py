"""i386: an indirect call of a function that pops the struct-return pointer.

`call [esp+0x24]` reaches a function returning `struct big` in memory: it
pops the hidden pointer (`ret $4`), and GCC's code and table after the call
count on it (objdump: `add esp, 0x14` then `pop ebx; ret 4`; readelf -wF:
the row after the call is 4 bytes lower than the pushes say). The analysis
cannot see the callee; taken to pop nothing, every row after the call was
"wrong" (4 in this function, 897 in i386 libstdc++.so.6). A return reached
with the stack pointer off its return address proves that assumption
wrong: the function is analysed again with such callees popping an amount
not known, and the rows after the call are undecided, never wrong.
"""


import pytest

from support import build, need_tool
from validate_support import objdump_lines, readelf_cfa, validate, wrong


@pytest.fixture(scope="module")
def library():
    return build("validate_sret_indirect.c", ["-m32", "-O2", "-fPIC", "-shared"], name="validate_sret_indirect-i386",
                 compiler=need_tool("gcc"))


def test_rows_after_an_unknown_callee_that_pops_are_not_wrong(library):
    lines = objdump_lines(library, "call_it")
    texts = [text for _, text in lines]
    [call] = [i for i, text in enumerate(texts) if text.startswith("call") and "*" in text]
    [ret] = [i for i, text in enumerate(texts) if text.startswith("ret")]
    lines = lines[:ret + 1]                                 # (the padding after it is no instruction of it)
    assert texts[ret] == "ret    $0x4"                      # the case: a function returning through sret
    after = lines[call + 1][0]
    # GCC's table: after the call the CFA is 4 bytes nearer the stack pointer than before it
    before_cfa = readelf_cfa(library, lines[call][0])
    after_cfa = readelf_cfa(library, after)
    assert int(before_cfa.split("+")[1]) - int(after_cfa.split("+")[1]) == 4, (before_cfa, after_cfa)
    report = validate(library, "--function", "call_it")
    assert wrong(report, "cfi") == []
    [detail] = report["functions_detail"]
    at = {line["address"]: line for line in detail["instructions"]}
    assert at[lines[call][0]]["sources"]["cfi"]["verdict"] == "right"
    for address, _ in lines[call + 1:]:
        assert at[address]["sources"]["cfi"]["verdict"] == "unknown", at[address]


def test_a_join_at_another_height_shows_the_callee_popped(library):
    """`pick`: the call's path meets the other at `add esp, 0x18` before one `ret`, so no return is
    misplaced; the two paths' stack heights at the join (4 bytes apart, taking the callee to pop
    nothing) show it: the rows from the call to the join are undecided, not wrong (they were 2
    wrong), and the table says 4 bytes lower after the call, as GCC counts on the pop."""
    lines = objdump_lines(library, "pick")
    texts = [text for _, text in lines]
    [call] = [i for i, text in enumerate(texts) if text.startswith("call") and "*" in text]
    assert [text for text in texts if text.startswith("ret")] == ["ret"]      # one plain return: not misplaced
    before_cfa = readelf_cfa(library, lines[call][0])
    after_cfa = readelf_cfa(library, lines[call + 1][0])
    assert int(before_cfa.split("+")[1]) - int(after_cfa.split("+")[1]) == 4, (before_cfa, after_cfa)
    report = validate(library, "--function", "pick")
    assert wrong(report, "cfi") == []
    [detail] = report["functions_detail"]
    at = {line["address"]: line for line in detail["instructions"]}
    assert at[lines[call + 1][0]]["sources"]["cfi"]["verdict"] == "unknown", at[lines[call + 1][0]]
    assert at[lines[0][0]]["sources"]["cfi"]["verdict"] == "right"
