"""The matrix's LLDB columns (tests/helpers/matrix.py): LLDB alone and the plugin's walk in LLDB.

x86_64 and i386 run natively (LLDB 16, run_lldb); aarch64 and arm32 under qemu-user's gdbstub
(LLDB 22 with its frame provider off for "LLDB alone", or 19), through `gdb-remote`.
"""
from __future__ import annotations

import json
import subprocess
from typing import Dict

import matrix
from support import need_tool

LLDB_FRAMES, LLDB_LOADED = "LLDB_FRAMES=", "LLDB_LOADED="


def _frames_script(marker):
    """A line printing LLDB's frames (SBThread) as JSON after `marker`."""
    return ("script import json; fr = list(lldb.thread.frames); print('%s' + json.dumps("
            "[{'pc': f.GetPC(), 'sp': f.GetSP(), 'cfa': f.GetCFA(), 'function': f.GetFunctionName(), "
            "'inlined': f.IsInlined(), 'artificial': f.IsArtificial()} for f in fr[:%d]]))"
            % (marker, matrix.FRAME_LIMIT))


def _printed(transcript, marker):
    """The frames printed after `marker` (the last one: not the command's echo)."""
    return json.loads(transcript.rsplit(marker, 1)[1].splitlines()[0])


REMOTE_LLDB = (22, 19)        # LLDB versions for qemu-user's gdbstub, newest first (16 hangs there)
REMOTE_LLDB_TIMEOUT = 120     # seconds a remote LLDB session may take
PROVIDER_LLDB = 22            # LLDB's own bt gets the plugin's proven frames from this version (as loaded)


def _lldb_remote(row, binary):
    """LLDB attached with `gdb-remote` to qemu-user's gdbstub: its own frames and the plugin's walk.

    LLDB 19 and 22 (LLDB 16 hangs once the program takes a signal, and at a stop in
    code without symbols). For a program without symbols LLDB's connection already
    runs it to the `brk` in stop_here; otherwise a breakpoint on that instruction
    stops it there (the same pc and registers; LLDB's batch mode would end at the
    stop by a signal). A program that stops by SIGSEGV (the null row) ends the batch:
    the commands then run as its on-crash commands (-k)."""
    import lldbrun
    from lldbrun import physical
    from qemu_user import qemu_user
    version = next((v for v in REMOTE_LLDB if lldbrun.find_lldb(v) is not None), None)
    if version is None:
        raise AssertionError("no LLDB %s: run tests/setup.sh" % " or ".join(map(str, REMOTE_LLDB)))
    after = [_frames_script(LLDB_FRAMES), "unwind backtrace --json"]
    if version >= PROVIDER_LLDB:        # LLDB 22's own frames as loaded: the provider back on
        after += ["unwind provider on", _frames_script(LLDB_LOADED)]
    sysroot, _ = matrix._sysroot(row)
    if row.mode == "null":
        stop, late = ["continue"], "-k"
    elif sysroot:
        stop, late = ["process handle SIGUSR1 --stop false --notify false --pass true",
                      "breakpoint set -n stop_here", "continue"], "-o"
    else:
        trap = _trap_address(row, matrix._cross(row, False))
        stop = ["script (lldb.thread.GetFrameAtIndex(0).GetPC() == 0x%x) or (lldb.debugger.HandleCommand("
                "'breakpoint set -a 0x%x'), lldb.debugger.HandleCommand('continue'))" % (trap, trap)]
        late = "-o"
    previous = lldbrun.version()
    lldbrun.use(version)
    try:
        argv = lldbrun.lldb_argv() + ["--no-lldbinit", "--batch"]
        _, emulator, _, options = matrix.CROSS[row.arch]
        with qemu_user(emulator, binary, [row.mode] if row.mode else [], sysroot=sysroot,
                       options=options) as address:
            # LLDB 22's frame provider is on as loaded: "LLDB alone" is LLDB with it off.
            alone = ["unwind provider off"] if version >= PROVIDER_LLDB else []
            libraries = ["settings append target.exec-search-paths %s/lib" % sysroot] if sysroot else []
            for line in ["command script import %s/lldb_commands" % matrix.ROOT, *alone, *libraries, "gdb-remote %s" % address,
                         "process handle SIGALRM --stop false --notify false --pass true", *stop]:
                argv += ["-o", line]
            for line in after:
                argv += [late, line]
            try:
                proc = subprocess.run(argv + [str(binary)], env=lldbrun.lldb_env(), capture_output=True, text=True,
                                      timeout=REMOTE_LLDB_TIMEOUT)
            except subprocess.TimeoutExpired as exc:
                raise AssertionError("LLDB %d on qemu-user's gdbstub did not finish in %d s: %s"
                                     % (version, REMOTE_LLDB_TIMEOUT, (exc.stdout or b"")[-2000:])) from None
    finally:
        lldbrun.use(previous)
    transcript = proc.stdout + proc.stderr
    lldbrun.TRANSCRIPTS.append(transcript)
    assert "Traceback" not in transcript and LLDB_FRAMES in transcript, transcript[-3000:]
    frames = _printed(transcript, LLDB_FRAMES)
    text = transcript.split("unwind backtrace --json", 1)[1]
    walk = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    out = {"lldb_alone": physical(frames), "lldb_walk": walk["frames"]}
    if version >= PROVIDER_LLDB:
        out["lldb22_bt"] = physical(_printed(transcript, LLDB_LOADED))
    return out


def _trap_address(row, twin):
    """The address of the breakpoint instruction in stop_here (`brk`, Arm's `bkpt`; static twin: absolute)."""
    objdump = need_tool(matrix.CROSS[row.arch][0] + "objdump")
    out = subprocess.run([objdump, "-d", "--disassemble=stop_here", str(twin)], capture_output=True, text=True,
                         check=True).stdout
    return int(next(line for line in out.splitlines() if "\tbrk\t" in line or "\tbkpt\t" in line)
               .split(":")[0], 16)


def lldb_columns(row, binary) -> Dict[str, list]:
    if row.core:
        return {}               # GDB's row: LLDB loads a core's modules from its own mapping list
    if row.arch not in matrix.NATIVE_FLAGS:
        return _lldb_remote(row, binary)
    from lldbrun import physical, run_lldb
    args = [row.mode] if row.mode else []
    breakpoint = matrix._breakpoint(row)
    results, _ = run_lldb(binary, [("lldb_alone", "frames", None),
                                   ("lldb_walk", "json", "unwind backtrace --json")],
                          args=args, breakpoint=breakpoint)
    return {"lldb_alone": physical(results["lldb_alone"]), "lldb_walk": results["lldb_walk"]["frames"]}
