"""`validate` on more planted CFI mistakes (validate_planted_more.S) and their correct twins.

5. the CFA left on rbp after `leave` restored the caller's rbp; 6. a wrong
register number; 7. .cfi_offset before the store; 8. an epilogue in the
middle of a function without its CFI. As in test_validate_planted.py, where
each mistake lies comes from the assembler's symbols (nm) and objdump's
instruction list: every planted instruction is wrong, nothing else, and the
twin is clean.
"""

import json

from validate_support import planted_and_twin, planted_ranges, run_validate, validate, wrong

planted, twin = planted_and_twin("validate_planted_more.S", ["-shared", "-nostdlib"])


def test_every_planted_error_is_found_at_its_exact_instructions(planted):
    report = validate(planted)
    expected = planted_ranges(planted, (5, 6, 7, 8))
    assert len(expected) == 7
    assert wrong(report, "cfi") == expected
    assert report["unknown"] == 0


def test_cfa_on_a_restored_register_says_why(planted):
    report = validate(planted, "--function", "cfa_on_restored")
    [d] = report["disagreements"]
    assert d["instruction"] == "ret"
    [item] = d["items"]
    assert (item["item"], item["table"]) == ("cfa", "rbp+16")
    assert "caller's value" in item["detail"]


def test_the_correct_twin_is_clean(twin):
    report = validate(twin)
    assert report["disagreements"] == []
    assert report["sources"]["cfi"]["wrong"] == 0 and report["sources"]["cfi"]["unknown"] == 0
    assert report["sources"]["cfi"]["right"] >= 30


def test_baseline_reports_only_what_is_new(planted, twin, tmp_path):
    old, clean = tmp_path / "old.json", tmp_path / "clean.json"
    first = run_validate(planted, "--json")
    assert first.returncode == 1
    old.write_text(first.stdout)
    clean.write_text(run_validate(twin, "--json").stdout)
    same = run_validate(planted, "--json", "--baseline", old)
    assert same.returncode == 0
    out = json.loads(same.stdout)
    assert out["modules"][0]["disagreements"] == [] and out["baseline"]["known_not_shown"] == 7
    new = run_validate(planted, "--json", "--baseline", clean)
    assert new.returncode == 1
    assert sorted(d["address"] for d in json.loads(new.stdout)["modules"][0]["disagreements"]) == \
        planted_ranges(planted, (5, 6, 7, 8))
    bad = run_validate(planted, "--baseline", planted)
    assert bad.returncode == 2 and "not the output of validate --json" in bad.stderr
    assert "Traceback" not in bad.stderr
