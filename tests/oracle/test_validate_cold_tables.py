"""`validate` through the shapes optimised code has: .cold parts entered in the middle, non-PIE jump
tables with entries in a .cold part, computed gotos, a function that returns only through its .cold part.

tests/fixtures/validate_cold_tables.S plants one CFI error in code reached
only through each shape, and its -DCORRECT twin none. The oracle for where
each error is, and which jump and table reach it, is the assembler's symbol
table (nm) and objdump's instruction list, as in test_validate_planted.
"""

from validate_support import labels, planted_and_twin, planted_ranges, validate, wrong

planted, twin = planted_and_twin("validate_cold_tables.S", ["-nostdlib", "-static", "-no-pie"])


def test_every_planted_error_behind_a_cold_entry_a_table_or_a_goto_is_found(planted):
    report = validate(planted, "--jobs", "1")
    assert wrong(report, "cfi") == planted_ranges(planted, (1, 2, 3, 4))
    assert report["unknown"] == 0


def test_the_twin_is_clean_and_every_instruction_decided(twin):
    report = validate(twin, "--jobs", "1")
    assert report["disagreements"] == [] and report["unknown"] == 0
    assert report["sources"]["cfi"]["right"] >= 45


def test_a_part_entered_in_its_middle_names_the_jump(twin):
    names = labels(twin)
    report = validate(twin, "--address", hex(names["cold_middle_1"]))
    [part] = report["functions_detail"]
    assert part["continuation"]
    lines = {line["address"]: line for line in part["instructions"]}
    assert lines[names["cold_middle_1"]]["entered_by"] == names["jump_1"]
    assert lines[names["bad_1_begin"]]["sources"]["cfi"]["verdict"] == "right"


def test_a_jump_table_names_its_table_and_bound(twin):
    names = labels(twin)
    lines = {line["address"]: line
             for line in validate(twin, "--function", "switch")["functions_detail"][0]["instructions"]}
    table = lines[names["jump_2"]]["table"]
    assert (table["address"], table["entries"], table["bounded"]) == (names["table_2"], 3, True)
    goto = {line["address"]: line
            for line in validate(twin, "--function", "computed_goto")["functions_detail"][0]["instructions"]}
    table = goto[names["jump_3"]]["table"]
    assert (table["address"], table["entries"], table["bounded"], table["targets"]) == \
        (names["table_3"], 256, True, 2)
