"""`validate --jobs N` gives the output of one process, and `--json` streams a record per function.

tests/fixtures/validate_cold.c built by GCC -O2 has functions split into a
hot part and a `.cold` part (nm names them `checked_sum.cold`, ...): the
cold part is entered by a jump with the parent's frame set up, so it is
checked after the parents, whichever worker analysed them. The workers are
given one function each (jobs.SMALLEST_CHUNK = 1) so that parents and
their cold parts land in different processes.
"""
from __future__ import annotations

import json
import subprocess

from support import build, need_tool
from validate_support import planted_and_twin, run_validate

planted, _ = planted_and_twin("validate_planted_more.S", ["-shared", "-nostdlib"])


def _cold_program():
    return build("validate_cold.c", ["-O2"])


def _checked(path, jobs, monkeypatch):
    from plugin.file_targets import load
    from plugin.validate import jobs as parallel
    from plugin.validate import offline
    monkeypatch.setattr(parallel, "SMALLEST_CHUNK", 1)
    target, modules = load(str(path))
    seen = []
    report = offline.validate_module(target, modules.all()[0], jobs=jobs,
                                     on_function=lambda _, f: seen.append((f.name, f.continuation, f.to_json())))
    out = report.to_json()
    out.pop("seconds")
    return out, seen


def test_two_processes_report_what_one_does(monkeypatch):
    program = _cold_program()
    nm = subprocess.run([need_tool("nm"), str(program)], capture_output=True, text=True, check=True).stdout
    cold = sorted(line.split()[2] for line in nm.splitlines() if line.endswith(".cold"))
    assert len(cold) >= 2, nm
    one, one_seen = _checked(program, 1, monkeypatch)
    two, two_seen = _checked(program, 2, monkeypatch)
    assert one == two and one_seen == two_seen
    assert one["functions"] >= 5 and one["disagreements"] == [] and one["sources"]["cfi"]["right"] > 50
    continuations = sorted(name for name, continuation, _ in one_seen if continuation)
    assert continuations == cold
    order = [name for name, _, _ in one_seen]
    for part in cold:                   # checked after the parent whose frame they take
        assert order.index(part) > order.index(part[:-len(".cold")])
    for _, _, record in one_seen:
        if record["name"] in cold:
            assert record["sources"]["cfi"]["checked"] > 0 and record["sources"]["cfi"]["unknown"] == 0


def test_json_streams_one_line_per_function(planted):
    done = run_validate(planted, "--json", "--jobs", "2")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    lines = done.stdout.splitlines()
    assert lines[0] == '{"functions": ['
    records = [json.loads(line.rstrip(",")) for line in lines[1:1 + len(document["functions"])]]
    assert records == document["functions"]
    [module] = document["modules"]
    assert len(records) == module["functions"] >= 4
    assert sum(r["instructions"] for r in records) == module["instructions"]
    streamed = sorted(d["address"] for r in records for d in r["disagreements"])
    assert streamed == sorted(d["address"] for d in module["disagreements"]) and streamed


def test_bad_jobs_is_an_argument_error(planted):
    done = run_validate(planted, "--jobs", "0")
    assert done.returncode == 2 and "--jobs" in done.stderr and "Traceback" not in done.stderr


def test_progress_line_only_on_a_terminal(planted):
    """stderr a terminal: a progress line, cleared at the end; a pipe: nothing (run_validate)."""
    import os
    import pty
    import sys

    from support import ROOT
    master, slave = pty.openpty()
    done = subprocess.Popen([sys.executable, "-m", "plugin", "validate", str(planted), "--jobs", "1"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=ROOT)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:         # the other end closed
            break
        if not chunk:
            break
        seen += chunk
    out = done.communicate(timeout=300)[0].decode()
    os.close(master)
    assert done.returncode == 1 and "DISAGREE" in out
    line = seen.decode()
    assert line.startswith("\rvalidate %s: " % planted.name) and "instructions checked" in line
    assert line.endswith("\r") and line.rstrip("\r").endswith(" ")       # blanked when done
    assert run_validate(planted, "--jobs", "1").stderr == ""


def _alone(path, select):
    from plugin.file_targets import load
    from plugin.validate import offline
    target, modules = load(str(path))
    seen = []
    offline.validate_module(target, modules.all()[0], select=select,
                            on_function=lambda _, f: seen.append(f.to_json()))
    return seen


def test_a_function_checked_alone_gets_the_whole_checks_verdicts(planted, monkeypatch):
    """--function/--address check the chosen function alone where it is entered by calls (no
    other function is analysed) and with the whole module where it is a .cold part (or the PLT,
    whose table says it is not entered by a call): either way its
    record is the whole check's, on the planted defects, GCC's cold parts and Debian's libz."""
    import os
    libz = next(p for p in ("/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1")
                if os.path.exists(p))
    from plugin import analysis
    analysed, function = [], analysis.CodeAnalysis.function
    monkeypatch.setattr(analysis.CodeAnalysis, "function",
                        lambda self, start, end=None: analysed.append(start) or function(self, start, end))
    compared = alone = 0
    for path, stride in ((planted, 1), (_cold_program(), 1), (libz, 9)):
        whole = {record["start"]: record for record in _alone(path, None)}
        assert len(whole) >= 4
        for start in sorted(whole)[::stride]:
            analysed.clear()
            assert _alone(path, lambda s, e, start=start: s == start) == [whole[start]], (path, hex(start))
            alone += set(analysed) == {start}      # entered by calls: the only one analysed
            compared += 1
    assert compared >= 25 and alone >= 20, (compared, alone)
