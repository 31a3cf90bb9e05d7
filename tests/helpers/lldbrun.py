"""Drive the real LLDB 16 from tests, two ways.

- run_lldb(): a standalone Python script (tests/helpers/lldb_driver.py) that does
  `import lldb` and drives one debugger session, like a user's script.
- run_batch(): `lldb-16 --batch -o ... PROGRAM`, like a user at a terminal.

LLDB embeds the system Python (/usr/bin/python3), so the driver runs under
it, not under the interpreter running pytest. Two quirks of Debian's
LLDB 16 are handled here: `import lldb` needs the directory `lldb-16 -P`
prints (the python3-lldb-16 symlink in dist-packages leads to an empty
directory), and a standalone Python only launches processes when
LLDB_DEBUGSERVER_PATH names lldb-server.
"""

import functools
import json
import os
import subprocess
import tempfile

from support import HELPERS, ROOT, need_tool

LLDB = "lldb-16"
SYSTEM_PYTHON = "/usr/bin/python3"
TRANSCRIPTS = []


@functools.lru_cache(maxsize=None)
def _lldb_python_path():
    out = subprocess.run([need_tool(LLDB), "-P"], capture_output=True, text=True, timeout=60)
    path = out.stdout.strip()
    assert out.returncode == 0 and os.path.isdir(os.path.join(path, "lldb")), out.stdout + out.stderr
    return path


def lldb_env(**extra):
    env = dict(os.environ, LLDB_DEBUGSERVER_PATH=need_tool("lldb-server-16"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_lldb_python_path(), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_lldb(binary, actions, args=(), breakpoint="stop_here", setup=(), launch=True,
             checkout=ROOT, timeout=600):
    """Run `binary` under a scripted LLDB to `breakpoint`, perform `actions`; returns (results, transcript)."""
    python = need_tool(SYSTEM_PYTHON)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        plan = {"checkout": str(checkout), "binary": str(binary), "args": list(map(str, args)),
                "breakpoint": breakpoint, "setup": list(setup), "launch": launch,
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
    """`lldb-16 --batch -o CMD... binary`; returns (exit status, transcript).

    LLDB's batch mode stops at the first command that fails and exits 1,
    so a test that wants an error line puts that command last.
    """
    argv = [need_tool(LLDB), "--no-lldbinit", "--batch"]
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

    Artificial frames are dropped; a run of inlined frames folds into one
    physical frame with the pc and sp of its innermost member and the
    function of the outermost (as `thread backtrace` prints them)."""
    out, first = [], None
    for frame in frames:
        if frame["artificial"]:
            continue
        if frame["inlined"]:
            first = first or frame
            continue
        head = first or frame
        out.append({"pc": head["pc"], "sp": head["sp"], "function": frame["function"]})
        first = None
    return out
