"""Drive the real gdb binary from tests: one batch session per call."""

import json
import os
import subprocess
import tempfile

from support import HELPERS, ROOT, need_tool

TRANSCRIPTS = []      # every transcript of the session, checked for tracebacks at the end


def run_gdb(binary, actions, args=(), breakpoint="stop_here", setup=(), timeout=600,
            gdb_program="gdb", remote=None, core=None):
    """Run `binary` under GDB to `breakpoint`, perform `actions`, return (results, transcript).

    remote: "HOST:PORT" of a gdbstub already running the program (qemu-user's
    -g PORT): GDB connects with `target remote` and continues instead of `run`.
    core: a core file GDB opens without the executable (`binary` is not loaded).
    """
    gdb = need_tool(gdb_program)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        plan = {"checkout": str(ROOT), "binary": str(binary), "args": list(map(str, args)),
                "breakpoint": breakpoint, "setup": list(setup), "actions": list(actions), "out": out,
                "remote": remote, "core": str(core) if core else None}
        env = dict(os.environ, UNWIND_TEST_PLAN=json.dumps(plan))
        proc = subprocess.run([gdb, "-nx", "-q", "-batch", "-x", str(HELPERS / "gdb_driver.py")],
                              env=env, capture_output=True, text=True, timeout=timeout)
        transcript = proc.stdout + proc.stderr
        TRANSCRIPTS.append(transcript)
        assert os.path.exists(out), "GDB wrote no results:\n" + transcript[-3000:]
        with open(out) as handle:
            results = json.load(handle)
    assert "__error__" not in results, results["__error__"] + "\n" + transcript[-3000:]
    assert "Traceback" not in transcript, transcript
    return results, transcript
