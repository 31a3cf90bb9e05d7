"""Write every `-json` output of the plugin on the test scenarios to files, to diff two checkouts.

    python3 tests/helpers/json_snapshots.py OUT_DIR [--checkout DIR] [--build-dir DIR]
                                            [--only gdb,lldb,cli] [--scenarios a,b] [--jobs N]
                                            [--no-pid-namespace]

OUT_DIR gets one file per (debugger, scenario, build, command): the command's
output exactly as printed (or, when the command failed, the error as JSON).
Run it once per checkout and compare the directories with `diff -r`:

    python3 tests/helpers/json_snapshots.py /tmp/json-a --checkout /path/to/checkout-a
    python3 tests/helpers/json_snapshots.py /tmp/json-b --checkout /path/to/checkout-b
    diff -r /tmp/json-a /tmp/json-b

--checkout is the tree whose plugin is loaded (gdb_unwinder/gdbinit.py,
lldb_commands/, `python -m plugin`); this script, its debugger drivers
(gdb_driver.py, lldb_driver.py beside it) and the fixture sources
(tests/fixtures of this script's own tree) are the same for both runs, so
an older checkout with another test layout can be measured too.

Scenarios: chain.c built -O0, -O2 and -O2 -fomit-frame-pointer, stopped
where tests/gdb/test_gdb_unwinder.py and tests/lldb/test_lldb_commands.py
stop it (chain_scenarios.py, beside this script); at each stop
`unwind backtrace`, `explain all`, `tables` ($pc and main), `compare` and
`modules`, with the default sources and with a couple of -sources lists.
Offline: `python -m plugin tables FILE --json` on the builds and on a few
files of the oracle corpus (when it is present).

Deterministic by construction: the binaries are built once into a fixed
directory (--build-dir, default /tmp/unwind-json-snapshots) that is also
the debuggers' working directory and HOME; the debuggers run with a fixed
environment (as `env -i` plus PATH, LANG and what LLDB needs), the plan
variable the drivers read is removed from the debuggee's environment, and
both debuggers disable ASLR (their default, set explicitly here). So the
debuggee's stack addresses are the same in every run of every checkout.
Each session also runs in a new PID namespace (`unshare --pid --fork
--mount-proc`, when that works: it needs root or user namespaces), so the
debuggee's process id, which the signal scenario leaves in a register
(kill(getpid(), ...)), is the same too: just before the launch the namespace's last pid is set
(/proc/sys/kernel/ns_last_pid), since the debuggers' own threads take ids
in numbers that vary. Without the namespace (--no-pid-namespace, or unshare
failing) those register values differ from run to run.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from chain_scenarios import BUILDS, GDB_SCENARIOS, LLDB_SCENARIOS

HERE = Path(__file__).resolve().parent
OWN_ROOT = HERE.parents[1]
FIXTURES = OWN_ROOT / "tests" / "fixtures"
LLDB = "lldb-16"
SYSTEM_PYTHON = "/usr/bin/python3"

# (file name, command) at every stop; GDB spells options -json/-sources, LLDB --json/--sources.
GDB_COMMANDS = [
    ("backtrace", "unwind backtrace -json"),
    ("backtrace-cfi", "unwind backtrace -json -sources cfi"),
    ("backtrace-fp-scan", "unwind backtrace -json -sources frame-pointer,scan"),
    ("explain-all", "unwind explain -json all"),
    ("explain-all-fp-scan", "unwind explain -json -sources frame-pointer,scan all"),
    ("tables-pc", "unwind tables -json $pc"),
    ("tables-main", "unwind tables -json main"),
    ("compare", "unwind compare -json"),
    ("compare-cfi", "unwind compare -json -sources cfi"),
    ("modules", "unwind modules -json"),
]
LLDB_COMMANDS = [(name, command.replace(" -json", " --json").replace(" -sources", " --sources"))
                 for name, command in GDB_COMMANDS]

# Files of the oracle corpus for `python -m plugin tables` (skipped when absent).
CORPUS_FILES = [
    "sframe-v3-demo/sframe_demo_x86_64",
    "sframe-v3-demo/sframe_demo_aarch64",
    "framehop/fixtures/macos/arm64/fp/query-api",
    "symbolic/symbolic-testutils/fixtures/macos/crash",
]


UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def pid_namespace_prefix(wanted):
    """The command prefix that runs a session in its own PID namespace, or [] (with a warning)."""
    if not wanted:
        return []
    try:
        works = subprocess.run(UNSHARE + ["true"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    if not works:
        print("warning: unshare --pid does not work here; pid-dependent values will differ between runs",
              file=sys.stderr)
        return []
    return list(UNSHARE)


# Inside the session's own PID namespace, the next process id before the debuggee
# starts (the debuggers' threads also take ids, in numbers that vary run to run).
NEXT_PID = 4999
_SET_NEXT_PID = "open('/proc/sys/kernel/ns_last_pid', 'w').write('%d')" % NEXT_PID


def fixed_env(build_dir, **extra):
    """The whole environment of a debugger (and so of its debuggee): nothing inherited."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(build_dir)}
    env.update(extra)
    return env


def build(build_dir, flags_name):
    """chain.c with one flag set, rebuilt only when the source or flags change."""
    source = FIXTURES / "chain.c"
    flags = BUILDS[flags_name]
    key = hashlib.sha256(source.read_bytes() + repr(flags).encode()).hexdigest()[:12]
    out = build_dir / ("chain-%s" % flags_name)
    stamp = build_dir / ("chain-%s.key" % flags_name)
    if out.exists() and stamp.exists() and stamp.read_text() == key:
        return out
    local = build_dir / "chain.c"          # compiled from here: the debug info names this path
    shutil.copyfile(source, local)
    subprocess.run(["gcc", "-g", *flags, "-o", str(out), "chain.c", "-lpthread"], cwd=build_dir,
                   check=True, env=fixed_env(build_dir))
    stamp.write_text(key)
    return out


def write(out_dir, parts, text):
    path = out_dir.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def as_text(value):
    """A driver result as file text: the command's output, or the error as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, sort_keys=True)


def run_gdb_session(checkout, build_dir, binary, scenario, prefix):
    argv, breakpoint, setup, after = GDB_SCENARIOS[scenario]
    actions = [("after%d" % i, "cmd", c) for i, c in enumerate(after)]
    actions += [(name, "cmd", command) for name, command in GDB_COMMANDS]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        plan = {"checkout": str(checkout), "binary": str(binary), "args": argv, "breakpoint": breakpoint,
                "setup": ["set disable-randomization on", "unset environment UNWIND_TEST_PLAN", *setup,
                          *(["python " + _SET_NEXT_PID] if prefix else [])],
                "actions": actions, "out": out, "remote": None}
        proc = subprocess.run([*prefix, "gdb", "-nx", "-q", "-batch", "-x", str(HERE / "gdb_driver.py")],
                              env=fixed_env(build_dir, UNWIND_TEST_PLAN=json.dumps(plan)),
                              cwd=build_dir, capture_output=True, text=True, timeout=900)
        if not os.path.exists(out):
            raise RuntimeError("GDB wrote no results for %s:\n%s" % (scenario, (proc.stdout + proc.stderr)[-3000:]))
        with open(out) as handle:
            results = json.load(handle)
    if "__error__" in results:
        raise RuntimeError("GDB session %s failed: %s" % (scenario, results["__error__"]))
    return {name: as_text(results.get(name, {"error": "no result"})) for name, _ in GDB_COMMANDS}


def lldb_python_path():
    out = subprocess.run([LLDB, "-P"], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def run_lldb_session(checkout, build_dir, binary, scenario, python_path, prefix):
    argv, breakpoint, setup, after = LLDB_SCENARIOS[scenario]
    actions = list(after) + [(name, "cmd", command) for name, command in LLDB_COMMANDS]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        plan = {"checkout": str(checkout), "binary": str(binary), "args": argv, "breakpoint": breakpoint,
                "setup": ["settings set target.disable-aslr true",
                          "settings set target.unset-env-vars UNWIND_TEST_PLAN", *setup,
                          *(["script " + _SET_NEXT_PID] if prefix else [])],
                "launch": True, "actions": actions, "out": out}
        env = fixed_env(build_dir, PYTHONPATH=python_path, UNWIND_TEST_PLAN=json.dumps(plan),
                        LLDB_DEBUGSERVER_PATH=shutil.which("lldb-server-16") or "lldb-server-16")
        proc = subprocess.run([*prefix, SYSTEM_PYTHON, str(HERE / "lldb_driver.py")], env=env, cwd=build_dir,
                              capture_output=True, text=True, timeout=900)
        if not os.path.exists(out):
            raise RuntimeError("the LLDB driver wrote no results for %s:\n%s"
                               % (scenario, (proc.stdout + proc.stderr)[-3000:]))
        with open(out) as handle:
            results = json.load(handle)
    if "__error__" in results:
        raise RuntimeError("LLDB session %s failed: %s" % (scenario, results["__error__"]))
    files = {}
    for name, _ in LLDB_COMMANDS:
        result = results.get(name, {"error": "no result"})
        if isinstance(result, dict) and result.get("ok"):
            files[name] = result["output"]
        else:
            files[name] = as_text(result)
    return files


def run_cli(checkout, python, path, build_dir):
    proc = subprocess.run([python, "-m", "plugin", "tables", str(path), "--json"], cwd=checkout,
                          env=fixed_env(build_dir), capture_output=True, text=True, timeout=900)
    if proc.returncode == 0:
        return proc.stdout
    return json.dumps({"exit": proc.returncode, "stderr": proc.stderr}, indent=1)


def oracle_dir(checkout):
    path = Path(os.environ.get("UNWIND_ORACLES", Path(checkout).resolve().parent / "shared" / "oracles"))
    return path if (path / "MANIFEST.md").is_file() else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--checkout", type=Path, default=OWN_ROOT,
                        help="the tree whose plugin is run (default: this script's tree)")
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/unwind-json-snapshots"),
                        help="fixed directory of the builds, the debuggers' cwd and HOME")
    parser.add_argument("--only", default="gdb,lldb,cli", help="comma-separated subset of gdb,lldb,cli")
    parser.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="debugger sessions run at once")
    parser.add_argument("--no-pid-namespace", action="store_true",
                        help="do not run sessions under unshare --pid (process ids then vary)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    build_dir = args.build_dir.resolve()
    out_dir = args.out_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = set(args.only.split(","))
    wanted = set(args.scenarios.split(",")) if args.scenarios else None
    binaries = {name: build(build_dir, name) for name in BUILDS}
    python = checkout / ".venv" / "bin" / "python"
    python = str(python) if python.exists() else sys.executable
    prefix = pid_namespace_prefix(not args.no_pid_namespace) if parts & {"gdb", "lldb"} else []

    jobs = []
    if "gdb" in parts:
        jobs += [("gdb", scenario, flags, lambda s=scenario, f=flags: run_gdb_session(
            checkout, build_dir, binaries[f], s, prefix)) for scenario in GDB_SCENARIOS for flags in BUILDS
            if wanted is None or scenario in wanted]
    if "lldb" in parts:
        python_path = lldb_python_path()
        jobs += [("lldb", scenario, flags, lambda s=scenario, f=flags: run_lldb_session(
            checkout, build_dir, binaries[f], s, python_path, prefix)) for scenario in LLDB_SCENARIOS for flags in BUILDS
            if wanted is None or scenario in wanted]
    written = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(job): (debugger, scenario, flags) for debugger, scenario, flags, job in jobs}
        for future in concurrent.futures.as_completed(futures):
            debugger, scenario, flags = futures[future]
            for name, text in future.result().items():
                write(out_dir, (debugger, "%s-%s" % (scenario, flags), name + ".json"), text)
                written += 1
    if "cli" in parts:
        files = [("chain-%s" % name, path) for name, path in binaries.items()]
        corpus = oracle_dir(checkout)
        if corpus is not None:
            files += [(relative.replace("/", "_"), corpus / relative) for relative in CORPUS_FILES
                      if (corpus / relative).exists()]
        for label, path in files:
            write(out_dir, ("cli", "tables-%s.json" % label), run_cli(checkout, python, path, build_dir))
            written += 1
    print("%d files, %d debugger sessions, written to %s" % (written, len(jobs), out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
