"""Stepping, instruction by instruction, through libc and ld.so (issue 19: "right
in every state"): after every `stepi` the plugin's walk must equal GDB's own
frames (pc and sp of every physical frame; the CFA of each frame is its
caller's sp), GDB's unwinder being the oracle (the plugin's is disabled).

Fixture tests/fixtures/stepping.c, linked -z lazy: the first call of malloc
goes through its PLT stub and ld.so's lazy binder (_dl_runtime_resolve,
_dl_fixup, the symbol lookup); then free, qsort from its comparison callback
back into glibc's merge sort, and a signal handler's return through __restore_rt and rt_sigreturn back into
raise."""

import pytest

from gdb_actions import DISABLE, SIGNAL
from gdbrun import run_gdb
from support import HELPERS, build

# (function to break in, instructions to step from there)
SEGMENTS = {"malloc": ("step_malloc", 160), "free": ("step_free", 80), "qsort": ("by_value", 200),
            "signal": ("on_usr1", 60)}


def frames_of(record):
    return [(pc, sp) for pc, sp, _ in record["gdb"]], [(pc, sp) for pc, sp, _, _ in record["plugin"]]


@pytest.mark.parametrize("segment", sorted(SEGMENTS))
def test_every_step_walks_like_gdb(segment):
    function, steps = SEGMENTS[segment]
    binary = build("stepping.c", ["-O1", "-Wl,-z,lazy"])
    results, transcript = run_gdb(binary, [
        ("off", "cmd", DISABLE),
        ("load", "py", "exec(open(%r).read(), globals()) or 1" % str(HELPERS / "stepping_probe.py")),
        ("trace", "py", "trace(%d)" % steps),
    ], breakpoint=function, setup=["set backtrace past-main on", *SIGNAL])
    records = results["trace"]
    assert isinstance(records, list) and len(records) == steps, (records, transcript[-3000:])
    disagree = []
    for number, record in enumerate(records):
        native, ours = frames_of(record)
        if native != ours:
            disagree.append((number, hex(record["pc"]), record["function"], record["detail"][:200],
                             [(hex(a), hex(b)) for a, b in native], [(hex(a), hex(b)) for a, b in ours]))
        for (_, _, cfa, _), (_, caller_sp) in zip(record["plugin"], ours[1:]):
            assert cfa == caller_sp
    assert not disagree, "%d of %d steps disagree; first: %s" % (len(disagree), len(records), disagree[:3])
    # the segment went where it should
    functions = {r["function"] for r in records}
    expected = {"malloc": "_dl_fixup", "free": "free", "qsort": "msort", "signal": "__restore_rt"}[segment]
    assert any(expected in (f or "") for f in functions), sorted(f for f in functions if f)


def test_every_step_in_a_debian_program_walks_like_gdb():
    """/bin/ls -l (Debian's, stripped, lazily bound): from its 201st call of free,
    300 instructions through free, back into ls and on through its PLT stubs."""
    results, transcript = run_gdb("/bin/ls", [
        ("ignore", "cmd", "ignore 1 200"),
        ("continue", "cmd", "continue"),
        ("delete", "cmd", "delete"),
        ("off", "cmd", DISABLE),
        ("load", "py", "exec(open(%r).read(), globals()) or 1" % str(HELPERS / "stepping_probe.py")),
        ("trace", "py", "trace(300)"),
    ], args=["-l", "/usr/bin"], breakpoint="free", setup=["set backtrace past-main on"])
    records = results["trace"]
    assert isinstance(records, list) and len(records) == 300, (records, transcript[-3000:])
    disagree = [(n, hex(r["pc"]), r["function"]) for n, r in enumerate(records) if frames_of(r)[0] != frames_of(r)[1]]
    assert not disagree, "%d of %d steps disagree; first: %s" % (len(disagree), len(records), disagree[:5])
    modules = {r["module"] for r in records}
    assert {"ls", "libc.so.6"} <= modules, modules           # through libc and back into ls


@pytest.mark.parametrize("segment", ["malloc", "qsort", "signal"])
def test_every_step_gdbs_own_frames_with_claim_all_equal_gdb_alone(segment):
    """With `set unwind claim all`, after every `stepi` the frames GDB builds from the plugin's
    claims (fast claims computed ahead included: each stop starts them anew) have the names and
    callee-saved registers GDB alone gives."""
    function, steps = SEGMENTS[segment]
    results, transcript = run_gdb(build("stepping.c", ["-O1", "-Wl,-z,lazy"]), [
        ("load", "py", "exec(open(%r).read(), globals()) or 1" % str(HELPERS / "stepping_probe.py")),
        ("trace", "py", "claimed_trace(%d, 'all')" % min(steps, 120)),
    ], breakpoint=function, setup=["set backtrace past-main on", *SIGNAL])
    records = results["trace"]["records"]
    assert len(records) == min(steps, 120), transcript[-3000:]
    assert results["trace"]["claimed"] > len(records), results["trace"]["claimed"]
    disagree = [(n, hex(pc)) for n, (pc, ours, native) in enumerate(records) if ours != native]
    assert not disagree, "%d of %d steps disagree; first: %s" % (len(disagree), len(records), disagree[:5])
