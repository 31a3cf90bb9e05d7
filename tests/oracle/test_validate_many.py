"""`validate FILE FILE...`: each file's report as `validate FILE` gives it, in the order given, over any --jobs.

The files: a planted fixture (wrong rows: status 1), its correct twin
(status 0), a missing file (status 2) and Debian's /usr/bin/true. The oracle
for each file is the single-file command's own output.
"""
from __future__ import annotations

import json
import re

from validate_support import planted_and_twin, run_validate

planted, twin = planted_and_twin("validate_planted_more.S", ["-shared", "-nostdlib"])
MISSING = "/nonexistent/validate-me"


def _masked(text: str) -> str:
    """Timings differ from run to run."""
    text = re.sub(r", [0-9.]+ s\n", ", T s\n", text)
    return re.sub(r'"seconds": [0-9.]+', '"seconds": T', text)


def test_several_files_print_each_files_own_report_in_order(planted, twin):
    files = [planted, twin, MISSING, "/usr/bin/true"]
    singles = [run_validate(path) for path in files]
    assert [s.returncode for s in singles] == [1, 0, 2, 0]
    expected = "\n".join("File: %s\n%s" % (path, s.stdout) for path, s in zip(files, singles))
    for jobs in ("1", "2"):
        many = run_validate(*files, "--jobs", jobs)
        assert many.returncode == 2, many.stderr             # the worst of the files'
        assert _masked(many.stdout) == _masked(expected)
        assert "cannot open %s" % MISSING in many.stderr and "Traceback" not in many.stderr


def test_several_files_in_json_nest_each_files_document(planted, twin):
    files = [twin, planted]
    many = run_validate(*files, "--json", "--jobs", "2")
    assert many.returncode == 1, many.stderr
    found = json.loads(many.stdout)["files"]
    assert [(f["file"], f["status"]) for f in found] == [(str(twin), 0), (str(planted), 1)]
    for entry, path in zip(found, files):
        alone = json.loads(run_validate(path, "--json").stdout)
        for document in (entry["report"], alone):
            for module in document["modules"]:
                module.pop("seconds")
        assert entry["report"] == alone
    assert found[1]["report"]["modules"][0]["disagreements"]


def test_an_address_belongs_to_one_file(planted, twin):
    out = run_validate(planted, twin, "--address", "0x1000")
    assert out.returncode == 2 and "--address takes one FILE (2 given)" in out.stderr
    assert out.stdout == ""


def test_a_baseline_of_several_files_serves_each_of_them(planted, twin, tmp_path):
    earlier = run_validate(twin, planted, "--json", "--jobs", "1")
    assert earlier.returncode == 1
    (tmp_path / "baseline.json").write_text(earlier.stdout)
    again = run_validate(twin, planted, "--baseline", tmp_path / "baseline.json")
    assert again.returncode == 0, again.stdout + again.stderr          # nothing new in either file
    assert "DISAGREE" not in again.stdout and again.stdout.count("0 new") == 2
    alone = run_validate(planted, "--baseline", tmp_path / "baseline.json")
    assert alone.returncode == 0 and "DISAGREE" not in alone.stdout
    without = run_validate(planted)
    assert without.returncode == 1 and "DISAGREE" in without.stdout
