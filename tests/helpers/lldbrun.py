"""Drive a real LLDB from tests, two ways, in any of the LLDB versions present.

- run_lldb(): a standalone Python script (tests/helpers/lldb_driver.py) that does
  `import lldb` and drives one debugger session, like a user's script.
- run_batch(): `lldb --batch -o ... PROGRAM`, like a user at a terminal.

Versions (VERSIONS): LLDB 16 from apt (`lldb-16`, `lldb-server-16` on PATH);
19 and 22 unpacked by tests/setup.sh into $UNWIND_LLDB_ROOT/N (default
/opt/unwind-lldb/N), since their python3-lldb-N packages conflict with 16's.
Which one runs is chosen with use(version) (tests/lldb/conftest.py does it
for every test); LLDB 16 until then.

LLDB embeds the system Python (/usr/bin/python3), so the driver runs under
it, not under the interpreter running pytest. `import lldb` needs the
directory `lldb -P` prints (Debian's python3-lldb-16 symlink in
dist-packages leads to an empty directory), a standalone Python only
launches processes when LLDB_DEBUGSERVER_PATH names that version's
lldb-server, and an unpacked version finds its libLLVM through
LD_LIBRARY_PATH.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional

import pytest

from support import HELPERS, ROOT, need_tool

VERSIONS = (16, 19, 22)
LLDB_ROOT = os.environ.get("UNWIND_LLDB_ROOT", "/opt/unwind-lldb")
SYSTEM_PYTHON = "/usr/bin/python3"
TRANSCRIPTS = []


@dataclass(frozen=True)
class Lldb:
    """One LLDB installation: its executable, its lldb-server, its libraries."""
    version: int
    lldb: str
    server: str
    library_path: Optional[str]        # for LD_LIBRARY_PATH; None: the system's


def find_lldb(version):
    """The LLDB `version` present on this machine, or None."""
    import shutil
    lldb, server = shutil.which("lldb-%d" % version), shutil.which("lldb-server-%d" % version)
    if lldb and server:
        return Lldb(version, lldb, server, None)
    base = os.path.join(LLDB_ROOT, str(version))
    bin_dir = os.path.join(base, "usr", "lib", "llvm-%d" % version, "bin")
    lldb, server = os.path.join(bin_dir, "lldb"), os.path.join(bin_dir, "lldb-server")
    if os.access(lldb, os.X_OK) and os.access(server, os.X_OK):
        return Lldb(version, lldb, server, os.path.join(base, "usr", "lib", "x86_64-linux-gnu"))
    return None


def present_versions():
    """The versions of VERSIONS installed here (all of them are required in CI)."""
    return [v for v in VERSIONS if find_lldb(v) is not None]


_selected = [16]


def use(version):
    """Run the following run_lldb()/run_batch() calls with LLDB `version`."""
    _selected[0] = version


def version():
    """The LLDB version run_lldb()/run_batch() use now."""
    return _selected[0]


def current():
    """The selected Lldb; the test fails (never skips) when it is not installed."""
    found = find_lldb(version())
    if found is None:
        pytest.fail("LLDB %d is not installed: run tests/setup.sh (the README's set-up command)" % version())
    return found


@functools.lru_cache(maxsize=None)
def _lldb_python_path(lldb):
    env = _library_env(lldb, dict(os.environ))
    out = subprocess.run([lldb.lldb, "-P"], capture_output=True, text=True, timeout=60, env=env)
    path = out.stdout.strip()
    assert out.returncode == 0 and os.path.isdir(os.path.join(path, "lldb")), out.stdout + out.stderr
    return path


def _library_env(lldb, env):
    if lldb.library_path:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lldb.library_path, env.get("LD_LIBRARY_PATH")) if p)
    return env


def lldb_env(**extra):
    """The environment that runs the selected LLDB (and `import lldb` of it)."""
    lldb = current()
    env = _library_env(lldb, dict(os.environ, LLDB_DEBUGSERVER_PATH=lldb.server))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_lldb_python_path(lldb), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def lldb_argv():
    """argv[0] of the selected LLDB's command line."""
    return [current().lldb]


def run_lldb(binary, actions, args=(), breakpoint="stop_here", setup=(), launch=True,
             checkout=ROOT, timeout=600, core=None):
    """Run `binary` under a scripted LLDB to `breakpoint`, perform `actions`; returns (results, transcript)."""
    python = need_tool(SYSTEM_PYTHON)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        plan = {"checkout": str(checkout), "binary": str(binary), "args": list(map(str, args)),
                "breakpoint": breakpoint, "setup": list(setup), "launch": launch,
                "core": str(core) if core else None,
                "actions": list(actions), "out": out}
        proc = subprocess.run([python, str(HELPERS / "lldb_driver.py")],
                              env=lldb_env(UNWIND_TEST_PLAN=json.dumps(plan)),
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)
        assert os.path.exists(out), "the LLDB driver wrote no results:\n" + (proc.stdout + proc.stderr)[-3000:]
        with open(out) as handle:
            results = json.load(handle)
    transcript = results.pop("__transcript__", "") + "\n" + proc.stdout + proc.stderr
    TRANSCRIPTS.append(transcript)
    assert "__error__" not in results, results["__error__"] + "\n" + transcript[-3000:]
    assert "Traceback" not in transcript, transcript
    return results, transcript


def run_batch(binary, commands, import_plugin=True, checkout=ROOT, timeout=600):
    """`lldb --batch -o CMD... binary` (the selected version); returns (exit status, transcript).

    LLDB's batch mode stops at the first command that fails and exits 1,
    so a test that wants an error line puts that command last.
    """
    argv = lldb_argv() + ["--no-lldbinit", "--batch"]
    if import_plugin:
        argv += ["-o", "command script import %s/lldb_commands" % checkout]
    for line in commands:
        argv += ["-o", line]
    if binary is not None:
        argv.append(str(binary))
    proc = subprocess.run(argv, env=lldb_env(), capture_output=True, text=True, timeout=timeout)
    transcript = proc.stdout + proc.stderr
    TRANSCRIPTS.append(transcript)
    assert "Traceback" not in transcript, transcript
    return proc.returncode, transcript


def batch_outputs(transcript):
    """[(command, output)] from a batch transcript, split at the "(lldb) " echo lines."""
    out = []
    for line in transcript.splitlines():
        if line.startswith("(lldb) "):
            out.append([line[len("(lldb) "):], []])
        elif out:
            out[-1][1].append(line)
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


def batch_json(transcript, command):
    """The JSON a batch command printed (the first command equal to `command`)."""
    for cmd, output in batch_outputs(transcript):
        if cmd == command:
            return json.loads(output[output.index("{"):])
    raise AssertionError("no output for %r in:\n%s" % (command, transcript[-3000:]))


def physical(frames):
    """LLDB's physical frames from the driver's SBFrame list: [{pc, sp, function}].

    Artificial frames are dropped; an inlined frame folds into the frames
    after it that are on the same stack (same CFA and sp), the group taking
    the pc and sp of its innermost member and the function of its
    outermost (as `thread backtrace` prints them). An inlined frame on a
    stack of its own (LLDB flags some so) is a physical frame by itself.
    """
    return [{"pc": head["pc"], "sp": head["sp"], "function": frame["function"]} for head, frame, _ in _groups(frames)]


def physical_levels(frames):
    """LLDB's frame number of each physical frame's concrete frame (its `bt` number), innermost first."""
    return [index for _, _, index in _groups(frames)]


def _groups(frames):
    """(first frame, concrete frame, the concrete frame's index) of each physical frame (see physical())."""
    real = [(index, frame) for index, frame in enumerate(frames) if not frame["artificial"]]
    out, first = [], None
    for (index, frame), after in zip(real, [f for _, f in real[1:]] + [None]):
        joins = frame["inlined"] and after is not None and (after["cfa"], after["sp"]) == (frame["cfa"], frame["sp"])
        if joins:
            first = first or frame
            continue
        out.append((first or frame, frame, index))
        first = None
    return out
