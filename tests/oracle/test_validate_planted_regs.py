"""`validate` on planted saved-register rules that point at the wrong place (validate_planted_regs.S).

9. the rule's slot reused for a local after the value moved to r8; 10. a
`.cfi_register` naming r12, which still holds the caller's r12, where the
code copied rbx to r13; 11. the copy in r13 overwritten by a call's result
while the rule still names r13. As in test_validate_planted.py, where each
mistake lies comes from the assembler's symbols (nm) and objdump's
instruction list. 10 is wrong at exactly its instructions; 9 and 11 are
undecided there (the analysis does not track what was stored), never
right; the twin is clean.
"""

from validate_support import planted_and_twin, planted_ranges, validate, wrong

planted, twin = planted_and_twin("validate_planted_regs.S", ["-shared", "-nostdlib"])


def test_a_register_rule_naming_a_register_with_another_value_is_wrong(planted):
    report = validate(planted)
    assert wrong(report, "cfi") == planted_ranges(planted, (10,))
    [d] = validate(planted, "--function", "wrong_copy_register")["disagreements"][:1]
    [item] = d["items"]
    assert (item["item"], item["table"]) == ("rbx", "r12") and "caller's r12" in item["detail"]


def test_overwritten_slots_and_copies_are_never_right(planted):
    for name, number in (("slot_reused", 9), ("copy_overwritten", 11)):
        [function] = validate(planted, "--function", name)["functions_detail"]
        verdicts = {line["address"]: line["sources"]["cfi"]["verdict"] for line in function["instructions"]}
        bad = planted_ranges(planted, (number,))
        assert bad and all(verdicts[a] == "unknown" for a in bad), (name, verdicts)


def test_the_correct_twin_is_clean(twin):
    report = validate(twin)
    cfi = report["sources"]["cfi"]
    assert report["disagreements"] == [] and cfi["wrong"] == 0 and cfi["unknown"] == 0
    assert cfi["right"] == report["instructions"] >= 30
