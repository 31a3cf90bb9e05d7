"""How the sweep (sweep_tables.py) runs commands: run_limited (one command,
measured, under limits) and Worker.

The worker is a long-lived process that runs
`python -m plugin tables FILE --json` inside itself, one file after another,
so that thousands of small files do not each pay the start-up of Python and
the plugin (0.12 s CPU, most of a small file's time).

The sweep writes a line [FILE, OUTPUT] to the worker's stdin; the worker
writes the command's JSON to the file OUTPUT and answers one line
{"rc", "seconds" (CPU of this file), "peak_kb" (the worker's high-water mark
since its exec: an upper bound for this file)}. The command's exit status is kept; an
exception that escapes the command is reported as a failure, and after a
MemoryError the worker exits so the next file gets a fresh process.
"""
from __future__ import annotations

import gc
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESTART_AFTER = 200             # files per worker process, so no state piles up
TIME = "/usr/bin/time"           # GNU time (package "time")


def run_limited(cmd, timeout, memory_mb=None):
    """(exit status or 'timeout', stdout bytes, CPU seconds (user+sys), peak RSS KB, the last
    line of stderr) of cmd.

    Measured by /usr/bin/time, a small process that forks cmd: a child forked
    straight from this (large) process would start with, and report, this
    process's own peak RSS. Killed with its process group on timeout."""
    def limit():
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as usage:
        proc = subprocess.Popen([TIME, "-f", "%U %S %M", "-o", usage.name, *cmd], stdout=out,
                                stderr=err, preexec_fn=limit, cwd=ROOT, start_new_session=True)
        timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        proc.wait()
        timed_out = not timer.is_alive()
        timer.cancel()
        out.seek(0)
        data = out.read()
        err.seek(max(0, err.seek(0, os.SEEK_END) - 2000))
        last = (err.read().decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        measured = (usage.read().splitlines() or ["0 0 0"])[-1].split()
    rc = "timeout" if timed_out else proc.returncode
    return rc, data, float(measured[0]) + float(measured[1]), int(measured[2]), last


class Worker:
    """One worker process, started on first use and again after it died,
    timed out or served RESTART_AFTER files."""

    def __init__(self, python: str, memory_mb: int | None):
        self.python, self.memory_mb = python, memory_mb
        self.proc, self.served = None, 0

    def _start(self):
        def limit():
            if self.memory_mb:
                resource.setrlimit(resource.RLIMIT_AS, (self.memory_mb << 20, self.memory_mb << 20))
        self.proc = subprocess.Popen([self.python, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=ROOT, preexec_fn=limit, text=True)
        self.served = 0

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, path: str, timeout: float):
        """(exit status, 'timeout' or a failure, stdout bytes, CPU seconds, peak RSS KB)
        of `tables path --json`, as run_limited gives them."""
        if self.proc is None or self.proc.poll() is not None or self.served >= RESTART_AFTER:
            self.close()
            self._start()
        self.served += 1
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            self.proc.stdin.write(json.dumps([path, out.name]) + "\n")
            self.proc.stdin.flush()
            timer = threading.Timer(timeout, self.proc.kill)
            timer.start()
            line = self.proc.stdout.readline()
            timed_out = not timer.is_alive()
            timer.cancel()
            if not line:
                status = self.proc.wait()
                self.proc = None
                return ("timeout" if timed_out else "worker died (exit %s)" % status), b"", 0.0, 0
            answer = json.loads(line)
            return answer["rc"], out.read(), answer["seconds"], answer["peak_kb"]


def _peak_kb():
    """This process's peak RSS since its exec (VmHWM): ru_maxrss would also count
    the sweep's own pages, which the worker shared between fork and exec."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve():
    sys.path.insert(0, str(ROOT))
    from plugin.__main__ import main
    answers = sys.stdout
    for line in sys.stdin:
        path, out_name = json.loads(line)
        before = _cpu()
        with open(out_name, "w") as out:
            sys.stdout = out
            try:
                rc = main(["tables", path, "--json"])
            except MemoryError:
                rc = "memory"
            except BaseException as exc:        # reported as the file's failure, as a traceback would be
                rc = "raised %s: %s" % (type(exc).__name__, exc)
            finally:
                sys.stdout = answers
        gc.collect()
        answers.write(json.dumps({"rc": rc, "seconds": _cpu() - before, "peak_kb": _peak_kb()}) + "\n")
        answers.flush()
        if rc == "memory":
            return


if __name__ == "__main__":
    serve()
