"""GDB's own testsuite, alone and with the plugin loaded (issue 29 item 4).

The testsuite comes from Debian's source package of the system's GDB,
unpacked and configured by tests/setup.sh under
$UNWIND_GDB_ROOT/testsuite/gdb-VERSION. runtest runs the files about frames,
signals, tail calls, entry values, finish/return, cores, inline frames and
Python unwinders three times, with the system's GDB: alone, with
`-iex "source CHECKOUT/gdb_unwinder/gdbinit.py"` added to GDB's flags, the
way a user's gdbinit loads it, and with `-iex "set unwind guesses on"` after
that (frame-pointer chains and stack scanning claimed too; GUESSES_CI_FILES
by default, every file with UNWIND_GDB_TESTSUITE=full). Every test that
passes alone must pass with the plugin, as loaded and with guesses on, and
no traceback may come from the plugin's files.

Left out: gdb.python/py-unwind-maint.exp, which lists GDB's unwinders by
name ("info unwinder" expects only the test's own); any global unwinder
loaded (the plugin's) adds a line it does not expect. Likewise the one test
of gdb.python/py-framefilter.exp that expects "No frame filters."
(LISTS_WHAT_IS_REGISTERED); the file's other tests count.

Time (two busy cores, the runs at once): CI's files about 1.5 minutes;
UNWIND_GDB_TESTSUITE=full runs all of FULL, three times, about 8 minutes.
"""
from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from support import ROOT, every

ONE_GDB = True          # the testsuite is the system GDB's (tests/gdb/conftest.py)
GDB_ROOT = os.environ.get("UNWIND_GDB_ROOT", "/opt/unwind-gdb")
LEFT_OUT = {"gdb.python/py-unwind-maint.exp": "lists GDB's unwinders by name: a global unwinder adds one"}
# Single tests whose expected output is the absence of anything the plugin registers:
# (file, test) -> why. Every other test of their files counts.
LISTS_WHAT_IS_REGISTERED = {
    ("gdb.python/py-framefilter.exp", "info frame filter before loading filters"):
        "expects 'No frame filters.': the plugin registers two global frame filters, each disabled "
        "unless it ends a stack GDB would walk past (gdb_unwinder/stack_end.py, kernel_frames.py)",
}

CI_FILES = """
gdb.base/backtrace.exp gdb.base/sigaltstack.exp gdb.base/sigbpt.exp gdb.base/signull.exp gdb.base/siginfo.exp
gdb.base/finish.exp gdb.base/return.exp gdb.base/corefile.exp gdb.base/recurse.exp
gdb.arch/amd64-tailcall-cxx.exp gdb.arch/amd64-tailcall-noret.exp gdb.arch/amd64-tailcall-ret.exp
gdb.arch/amd64-tailcall-self.exp gdb.arch/amd64-entry-value.exp gdb.arch/amd64-entry-value-inline.exp
gdb.arch/amd64-entry-value-param.exp gdb.arch/amd64-entry-value-param-dwarf5.exp
gdb.arch/amd64-entry-value-paramref.exp gdb.arch/amd64-invalid-stack-middle.exp gdb.arch/amd64-invalid-stack-top.exp
gdb.python/py-unwind.exp gdb.python/py-unwind-inline.exp gdb.python/py-unwind-user-regs.exp
gdb.python/py-pending-frame-level.exp gdb.python/py-frame.exp gdb.python/py-frame-args.exp
gdb.python/py-frame-inline.exp
gdb.opt/inline-break.exp gdb.opt/inline-bt.exp gdb.opt/inline-cmds.exp gdb.opt/inline-locals.exp
gdb.opt/inline-small-func.exp
gdb.base/bp-cmds-continue-ctrl-c.exp
""".split()

FULL_FILES = CI_FILES + """
gdb.base/bt-on-error-and-warning.exp gdb.base/bt-on-fatal-signal.exp gdb.base/bt-selected-frame.exp
gdb.base/frame-args.exp gdb.base/frame-info-consistent.exp gdb.base/frame-selection.exp gdb.base/frameapply.exp
gdb.base/finish-pretty.exp gdb.base/return2.exp gdb.base/return-nodebug.exp
gdb.base/sigstep.exp gdb.base/sigall.exp gdb.base/signest.exp gdb.base/sigrepeat.exp gdb.base/siginfo-addr.exp gdb.base/siginfo-infcall.exp gdb.base/siginfo-obj.exp
gdb.base/signals.exp gdb.base/corefile2.exp gdb.base/gcore.exp gdb.base/step-bt.exp gdb.base/step-test.exp
gdb.base/until.exp gdb.base/advance.exp gdb.base/longjmp.exp gdb.base/unwind-on-each-insn.exp
gdb.base/unwindonsignal.exp gdb.base/call-signal-resume.exp gdb.base/stack-checking.exp
gdb.base/break-inline.exp gdb.base/skip-inline.exp
gdb.python/py-recurse-unwind.exp gdb.python/py-finish-breakpoint.exp gdb.python/py-finish-breakpoint2.exp
gdb.python/py-framefilter.exp
gdb.dwarf2/dw2-entry-value.exp gdb.dwarf2/dw2-inline-many-frames.exp gdb.dwarf2/frame-inlined-in-outer-frame.exp
gdb.dwarf2/dw2-dup-frame.exp gdb.dwarf2/dw2-ref-missing-frame.exp
""".split()

# The guesses-on run by default: the files where a guess could meet a frame GDB unwinds
# (signals, a corrupt stack, tail calls, recursion, Python unwinders, finish/return).
GUESSES_CI_FILES = """
gdb.base/backtrace.exp gdb.base/sigaltstack.exp gdb.base/signull.exp gdb.base/finish.exp gdb.base/recurse.exp
gdb.arch/amd64-tailcall-noret.exp gdb.arch/amd64-invalid-stack-middle.exp gdb.arch/amd64-invalid-stack-top.exp
gdb.python/py-unwind.exp gdb.python/py-frame.exp
""".split()
assert set(GUESSES_CI_FILES) <= set(CI_FILES)

RESULT = re.compile(r"^(PASS|FAIL|XFAIL|KFAIL|XPASS|UNRESOLVED|UNSUPPORTED|UNTESTED): (\S+?\.exp): (.*)$")
PLUGIN_TRACEBACK = re.compile(r'File "[^"]*/gdb_unwinder/[^"]*", line \d+')


def gdb_testsuite_dir():
    """gdb/testsuite of the system GDB's source package; fails (never skips) when it is absent."""
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "gdb"], capture_output=True, text=True).stdout
    found = glob.glob(os.path.join(GDB_ROOT, "testsuite", "gdb-%s" % version, "gdb", "testsuite", "site.exp"))
    if not found or shutil.which("runtest") is None:
        pytest.fail("GDB %s's testsuite or runtest is not installed: run tests/setup.sh" % version)
    return os.path.dirname(found[0])


def _start(suite, outdir, files, plugin, guesses=False):
    # runtest splits these the Tcl way: double quotes group words, single quotes would not
    # (GDB would get -iex "'set" and source nothing)
    flags = '-nw -nx -iex "set height 0" -iex "set width 0" -data-directory /usr/share/gdb'
    if plugin:
        flags += ' -iex "source %s/gdb_unwinder/gdbinit.py"' % ROOT
    if guesses:
        flags += ' -iex "set unwind guesses on"'
    shutil.copy(os.path.join(suite, "site.exp"), outdir)       # srcdir in it is absolute
    argv = ["runtest", "--tool", "gdb", "GDB=/usr/bin/gdb", "INTERNAL_GDBFLAGS=" + flags, *files]
    return subprocess.Popen(argv, cwd=outdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def results(sum_text):
    """{status: Counter of (file, test name)} from a runtest .sum file."""
    out = collections.defaultdict(collections.Counter)
    for line in sum_text.splitlines():
        found = RESULT.match(line)
        if found:
            out[found.group(1)][(found.group(2), found.group(3).strip())] += 1
    return out


def test_results_parse_as_dejagnu_writes_them():
    parsed = results("Running x.exp ...\nPASS: gdb.base/a.exp: bt\nPASS: gdb.base/a.exp: bt\n"
                     "FAIL: gdb.python/b.exp: info frame (timeout)\n# of expected passes\t\t2\n")
    assert parsed["PASS"] == {("gdb.base/a.exp", "bt"): 2}
    assert parsed["FAIL"] == {("gdb.python/b.exp", "info frame (timeout)"): 1}


def test_every_test_passing_alone_passes_with_the_plugin():
    suite = gdb_testsuite_dir()
    full = os.environ.get("UNWIND_GDB_TESTSUITE") == "full" or every("")
    files = [f for f in (FULL_FILES if full else CI_FILES) if f not in LEFT_OUT]
    guess_files = files if full else GUESSES_CI_FILES
    assert all(os.path.exists(os.path.join(suite, f)) for f in files), [f for f in files if not
                                                                       os.path.exists(os.path.join(suite, f))]
    with tempfile.TemporaryDirectory() as alone_dir, tempfile.TemporaryDirectory() as plugin_dir, \
            tempfile.TemporaryDirectory() as guesses_dir:
        runs = [_start(suite, alone_dir, files, False), _start(suite, plugin_dir, files, True),
                _start(suite, guesses_dir, guess_files, True, guesses=True)]
        for run in runs:
            run.wait(timeout=3600)
        alone, plugin, guesses = ({status: counts for status, counts in
                                   results(open(os.path.join(where, "gdb.sum"), errors="replace").read()).items()}
                                  for where in (alone_dir, plugin_dir, guesses_dir))
        logs = {}
        for name, where in (("as loaded", plugin_dir), ("guesses on", guesses_dir)):
            with open(os.path.join(where, "gdb.log"), errors="replace") as handle:
                logs[name] = handle.read()
    assert len(alone["PASS"]) > 500, alone
    alone_guessed = collections.Counter({key: n for key, n in alone["PASS"].items() if key[0] in guess_files})
    assert len(alone_guessed) > 100, alone_guessed
    for name, run, passing in (("as loaded", plugin, alone["PASS"]), ("guesses on", guesses, alone_guessed)):
        log = logs[name]
        assert "Excess command line arguments" not in log and "unwind plugin: not loaded" not in log, name
        assert "Undefined set unwind command" not in log, name
        lost = passing - run["PASS"] - collections.Counter(LISTS_WHAT_IS_REGISTERED.keys())
        assert not lost, "passing alone, not with the plugin (%s):\n" % name + "\n".join(
            "%s: %s" % key for key in sorted(lost))
        tracebacks = PLUGIN_TRACEBACK.findall(log)
        assert not tracebacks, (name, tracebacks[:10])
