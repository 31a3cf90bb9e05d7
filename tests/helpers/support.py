"""Shared test helpers: build fixture programs, find the oracle corpus, run tools."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
HELPERS = ROOT / "tests" / "helpers"
BUILD = ROOT / "tests" / ".build"


# One variable runs every slow matrix whole (every GDB test on GDB 10/13/16, the unit tests on every Python, every LLDB test
# on LLDB 16/19/22, GDB's testsuite on all its files); each also has its own variable.
EVERYTHING = "UNWIND_EVERYTHING"

# objcopy's options that remove a program's unwind tables: .eh_frame (and its index), and with it .debug_frame
NO_EH = ["--remove-section", ".eh_frame", "--remove-section", ".eh_frame_hdr"]
NO_TABLES = NO_EH + ["--remove-section", ".debug_frame"]


def every(variable: str) -> bool:
    """Does the slow matrix `variable` names run whole (its own variable, or UNWIND_EVERYTHING)?"""
    return bool(os.environ.get(EVERYTHING) or os.environ.get(variable))


def oracle_dir():
    """../shared/oracles beside the checkout (UNWIND_ORACLES overrides).

    Outside CI a missing corpus skips the test that needs it; under CI it
    fails, so CI can never pass by skipping the oracle tests.
    """
    path = Path(os.environ.get("UNWIND_ORACLES", ROOT.parent / "shared" / "oracles"))
    if not (path / "MANIFEST.md").is_file():
        message = "oracle corpus absent at %s" % path
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def need_tool(name):
    """Path of a required external tool; tests fail (not skip) when it is missing.

    gdb and gdb-multiarch are the GDB version the tests drive now (gdbversions.use()).
    """
    import gdbversions
    if name in gdbversions.PROGRAMS:
        return gdbversions.program(name)
    path = shutil.which(name)
    if path is None:
        pytest.fail("%s is not installed: run the README's set-up command" % name)
    return path


def build(source, flags=(), name=None, compiler="gcc", post=None):
    """Compile tests/fixtures/SOURCE with FLAGS; cached by content and flags.

    `post` is an optional list of commands (argv lists with {out} in them)
    run on the output, e.g. objcopy to strip .eh_frame.
    Returns the Path of the executable.
    """
    src = FIXTURES / source
    key = hashlib.sha256(src.read_bytes() + repr((list(flags), compiler, post)).encode()).hexdigest()[:12]
    stem = name or src.stem
    out = BUILD / ("%s-%s" % (stem, key))
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp%d" % os.getpid())   # parallel workers may build the same fixture
    cmd = [compiler, "-g", *flags, "-o", str(tmp), str(src)]
    if compiler in ("gcc", "g++", "cc"):
        cmd.append("-lpthread")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    for step in post or ():
        subprocess.run([part.replace("{out}", str(tmp)) for part in step], check=True,
                       capture_output=True, text=True)
    tmp.rename(out)
    return out


def gdb_batch(args, plugin=True, timeout=300):
    """GDB in batch mode without ~/.gdbinit (the plugin loaded as a user's ~/.gdbinit line would, or not)
    with ARGS: the CompletedProcess, its output as text."""
    command = [need_tool("gdb"), "-nx", "-q", "-batch"]
    if plugin:
        command += ["-ex", "source %s/gdb_unwinder/gdbinit.py" % ROOT]
    return subprocess.run(command + list(args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run(cmd, **kw)


def tool_output(name, *args):
    """Standard output of the required tool NAME run with ARGS; the test fails with its stderr if it fails."""
    out = run([need_tool(name), *args])
    assert out.returncode == 0, out.stderr
    return out.stdout


def pcs(frames):
    """The pcs of a list of frames (the debugger's or the plugin's)."""
    return [f["pc"] for f in frames]


def pcs_sps(frames):
    """(pc, sp) of each frame of a list (the debugger's or the plugin's)."""
    return [(f["pc"], f["sp"]) for f in frames]


def assert_cfi_walk_matches(walk, debugger_frames):
    """The plugin's `unwind backtrace` (JSON, CFI only) begins with the debugger's physical
    frames, same pc and sp (the plugin may go on past main); its innermost frame comes from
    the register context, every other from CFI, and it ends outermost."""
    frames = walk["frames"]
    assert [f["pc"] for f in frames][:len(debugger_frames)] == [f["pc"] for f in debugger_frames]
    assert [f["sp"] for f in frames][:len(debugger_frames)] == [f["sp"] for f in debugger_frames]
    assert frames[0]["method"] == "context"
    assert all(f["method"] == "cfi" for f in frames[1:])
    assert walk["stop_reason"] == "outermost"


def corrupted_return_row(before, after):
    """`unwind compare` (JSON) on chain.c before and after level2's saved return address
    was overwritten with a non-code address. They agree before; after, the plugin refuses
    the address and stops, so level 3 is the first row only the debugger has: returned."""
    assert before["agree"]
    assert not after["agree"]
    first = next(r for r in after["frames"] if not r["agrees"])
    assert first["level"] == 3
    assert first["plugin"] is None
    assert after["stop_reason"] == "return-address-not-code"
    return first


def system_library(name):
    """Path of a system library such as libc.so.6, as the dynamic loader sees it."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split()[0] == name and "x86-64" in parts[0]:
            return Path(parts[1]).resolve()
    for cand in ("/lib/x86_64-linux-gnu/" + name, "/lib64/" + name):
        if os.path.exists(cand):
            return Path(cand).resolve()
    pytest.fail("system library %s not found" % name)


def walk_levels(frames):
    """{level: (function, kind)} of a plugin walk's JSON frames, virtual ones included
    (kind: "physical", "inline" or "tail-call"), for comparing with a debugger's own levels."""
    out = {}
    for frame in frames:
        out[frame["level"]] = (frame["function"], "physical")
        for virtual in frame["inline_frames"] + frame["tail_calls"]:
            out[virtual["level"]] = (virtual["function"], virtual["kind"])
    return out
