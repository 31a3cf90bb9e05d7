"""The frames-added matrix: what GDB and LLDB find alone, and with the plugin, on code without tables.

Each row is a program (tests/fixtures/matrix.c, jit.c) built normally, then
its .eh_frame, .eh_frame_hdr and .debug_frame removed with objcopy (code
and addresses unchanged), sometimes its symbols too; one is a real program
nobody here wrote (Debian's /usr/bin/sleep, shipped without symbols, its
tables removed the same way, stopped in libc's clock_nanosleep). The truth is GDB's own
backtrace on the twin that keeps its tables (arm32's signal rows: qemu's shadow call stack, pcs
only, tests/helpers/matrix_signal.py); for the JIT row (JIT code
never has tables) it is GDB's own backtrace below the JIT frame plus GDB's
own backtrace after single-stepping out of the JIT code into its caller.

A frame is right when its pc and its stack pointer relative to the
innermost frame's are the truth's (the debuggers start the program with
different environments, which moves the whole stack by a multiple of 16);
the frame a signal interrupted may stop at any pc of the same function,
and the frames from it on are compared relative to its stack pointer (the
kernel aligns the signal frame's parts, so the shift may change there).
A column counts the frames right from the innermost one, up to and
including `main` (`thread_main` on a thread's stack).

Columns: GDB alone (the plugin's unwinder disabled), GDB with the plugin
(default settings, then `set unwind fallback on`), the plugin's own walk
in GDB (`unwind backtrace`), LLDB alone and the plugin's walk in LLDB.

    python tests/helpers/matrix.py --update-readme
writes docs/matrix.md's table from the results the last test run saved
(tests/.build/matrix-results.json); tests/gdb/test_matrix.py runs it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from matrix_judge import (_in_function, _pie_bias, function_ranges, right_by_pc,  # noqa: E402,F401
                          right_frames)
from matrix_signal import arm_sigstop, right_pcs, shadow_truth  # noqa: E402
from qemu_arm import SYSROOT  # noqa: E402
from support import BUILD, FIXTURES, NO_TABLES, ROOT, build, need_tool  # noqa: E402

RESULTS = BUILD / "matrix-results.json"
# LLDB 22's own `bt` as loaded (its frame provider on), counted by pc: tests/lldb/test_lldb_provider_matrix.py
PROVIDER_RESULTS = BUILD / "matrix-lldb22-bt.json"
PROVIDER_COLUMN = "LLDB 22 `bt` (as loaded)"
README = ROOT / "docs" / "matrix.md"     # the table the README used to hold; the flag keeps its name
BEGIN, END = "<!-- matrix: begin (tests/helpers/matrix.py) -->", "<!-- matrix: end -->"
FLAGS = {"O2": ["-O2", "-fomit-frame-pointer"], "O0": ["-O0", "-fno-omit-frame-pointer"]}
COLUMNS = (("gdb_alone", "GDB alone"), ("gdb_default", "GDB + plugin"), ("gdb_fallback", "GDB + plugin, fallback on"),
           ("gdb_walk", "`unwind backtrace` (GDB)"), ("lldb_alone", "LLDB alone"),
           ("lldb_walk", "`unwind backtrace` (LLDB)"))
FRAME_LIMIT = 64
ARM_THUMB, ARM_ARM = "arm32 Thumb-2", "arm32 Arm"
# arch -> (cross tools' prefix, qemu-user, compiler flags, qemu options): static builds under qemu-user
CROSS = {"aarch64": ("aarch64-linux-gnu-", "qemu-aarch64", [], ("-cpu", "max,sve=off")),
         ARM_THUMB: ("arm-linux-gnueabihf-", "qemu-arm", ["-mthumb"], ()),
         ARM_ARM: ("arm-linux-gnueabihf-", "qemu-arm", ["-marm"], ())}
NATIVE_FLAGS = {"x86_64": [], "i386": ["-m32"]}


@dataclass(frozen=True)
class Row:
    arch: str              # x86_64, i386 (native), aarch64, arm32 Thumb-2, arm32 Arm (qemu-user): CROSS
    program: str           # fixture file
    build: str             # key of FLAGS
    mode: str              # the program's argument
    stripped: bool = False  # symbols removed too
    tables_removed: bool = True
    anchor: str = "main"   # the truth is cut after this function
    core: bool = False     # GDB opens a core of the program (its tables kept) without the executable

    @property
    def name(self):
        if self.core:
            return "%s core without its executable (%s -%s, to %s)" % (self.arch, self.mode, self.build, self.anchor)
        if self.program.startswith("/"):
            return "%s %s (Debian's, no tables)" % (self.arch, Path(self.program).name)
        what = {"matrix.c": self.mode, "jit.c": "jit", "sigstop.c": "raise signal"}[self.program]
        strip = ", no symbols" if self.stripped else ""
        return "%s %s -%s%s" % (self.arch, what, self.build, strip)


def rows() -> List[Row]:
    out = []
    for arch in ("x86_64", "aarch64", "i386", ARM_THUMB, ARM_ARM):
        for flags in ("O2", "O0"):
            for stripped in (False, True):
                for mode in ("plain", "signal"):
                    if mode == "signal" and arch in (ARM_THUMB, ARM_ARM):
                        continue        # GDB's own Arm signal frame is wrong under qemu-arm: no truth
                    out.append(Row(arch, "matrix.c", flags, mode, stripped))
        if arch in (ARM_THUMB, ARM_ARM):     # a signal raised (sigstop.c): the truth is qemu's shadow call stack
            out += [Row(arch, "sigstop.c", flags, "") for flags in ("O2", "O0")]
        out.append(Row(arch, "matrix.c", "O2", "thread", anchor="thread_main"))
        out.append(Row(arch, "matrix.c", "O2", "null"))
    out.append(Row("x86_64", "jit.c", "O2", "", tables_removed=False))
    # `gdb -c core` without the executable: GDB has no objfile for it nor for libc.
    out.append(Row("x86_64", "matrix.c", "O2", "plain", tables_removed=False, anchor="_start", core=True))
    # The same on aarch64: a core Linux wrote (Debian's arm64 kernel under qemu-system-aarch64).
    out.append(Row("aarch64", "matrix.c", "O2", "plain", tables_removed=False, anchor="_start", core=True))
    # A real program nobody here wrote: Debian's sleep (stripped of symbols as shipped).
    out.append(Row("x86_64", "/usr/bin/sleep", "O2", "100", anchor="__libc_start_call_main"))
    return out


# -- builds --------------------------------------------------------------------------

def binaries(row: Row) -> Tuple[Path, Path]:
    """(the twin with tables and symbols, the program under test)."""
    if row.program.startswith("/"):
        return Path(row.program), _system_copy(row)
    if row.core:
        twin = binaries(replace(row, core=False))[0]
        return twin, twin
    if row.program == "sigstop.c":
        name = "%s-%s" % ("thumb" if row.arch == ARM_THUMB else "arm", row.build)
        return arm_sigstop(name, debug_frame=True), arm_sigstop(name)
    if row.arch in NATIVE_FLAGS:
        flags = FLAGS[row.build] + NATIVE_FLAGS[row.arch]
        tag = "" if row.arch == "x86_64" else "-" + row.arch
        twin = build(row.program, flags, name="matrix-%s-%s%s" % (row.program[:-2], row.build, tag))
        post = [["objcopy", *NO_TABLES, "{out}"]] if row.tables_removed else []
        if row.stripped:
            post.append(["objcopy", "--strip-all", "{out}"])
        name = "matrix-%s-%s-noeh%s%s" % (row.program[:-2], row.build, "-strip" if row.stripped else "", tag)
        return twin, build(row.program, flags, name=name, post=post) if post else twin
    return _cross(row, False), _cross(row, True)


def _system_copy(row):
    """A copy of an installed program with its tables removed."""
    out = BUILD / ("matrix-system-%s-noeh" % Path(row.program).name)
    if not out.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp%d" % os.getpid())
        subprocess.run(["objcopy", *NO_TABLES, row.program, str(tmp)], check=True, capture_output=True)
        tmp.rename(out)
    return out


def _breakpoint(row):
    """Where the program is stopped: matrix.c stops itself (a breakpoint instruction)."""
    if row.program.startswith("/"):
        return "clock_nanosleep"            # libc (with tables), called through the program's own code
    return "stop_here" if row.program in ("jit.c", "sigstop.c") else None


def _cross(row, under_test):
    """Static aarch64 and 32-bit Arm executables (qemu-user has no /proc; the static one is found
    from its entry)."""
    prefix, _, flags, _ = CROSS[row.arch]
    arch = {"aarch64": "a64", ARM_THUMB: "arm32-thumb", ARM_ARM: "arm32-arm"}[row.arch]
    stem = "matrix-%s-%s-%s%s" % (arch, row.program[:-2], row.build,
                                   ("-noeh" + ("-strip" if row.stripped else "")) if under_test else "")
    out = BUILD / stem
    source = FIXTURES / row.program
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp%d" % os.getpid())
    subprocess.run([need_tool(prefix + "gcc"), "-g", "-static", *FLAGS[row.build], *flags, "-o", str(tmp),
                    str(source), "-lpthread"], check=True, capture_output=True, text=True)
    if under_test:
        objcopy = need_tool(prefix + "objcopy")
        subprocess.run([objcopy, *NO_TABLES, str(tmp)], check=True, capture_output=True)
        if row.stripped:
            subprocess.run([objcopy, "--strip-all", str(tmp)], check=True, capture_output=True)
    tmp.rename(out)
    return out


# -- sessions ------------------------------------------------------------------------

NATIVE = ["set backtrace past-main on"]
QEMU_SETUP = ["handle SIGALRM nostop noprint pass"]


def core_of(row, binary) -> Path:
    """A core of the program stopped where the row stops it (`gcore`; aarch64: dumped by Linux under
    qemu-system-aarch64, tests/helpers/matrix_core.py), made once per build."""
    if row.arch == "aarch64":
        from matrix_core import kernel_core
        return kernel_core(binary, row.mode)
    out = BUILD / ("%s.core" % binary.name)
    if not out.exists() or out.stat().st_mtime < binary.stat().st_mtime:
        made = run_at_row(replace(row, core=False), binary, [("gcore", "cmd", "gcore %s" % out)])
        assert out.exists(), made
    return out


def run_at_row(row, binary, actions, breakpoint=None):
    """GDB's results of `actions` (gdbrun.run_gdb's) at the row's stop: natively, in its core, or
    under qemu-user for another machine (with its sysroot)."""
    from gdbrun import run_gdb
    args = [row.mode] if row.mode else []
    breakpoint = breakpoint or _breakpoint(row)
    if row.core:
        gdb = "gdb" if row.arch in NATIVE_FLAGS else "gdb-multiarch"
        return run_gdb(binary, actions, core=core_of(row, binary), breakpoint=None, setup=NATIVE,
                       gdb_program=gdb)[0]
    if row.arch in NATIVE_FLAGS:
        setup = NATIVE + (["set breakpoint pending on"] if row.program.startswith("/") else [])
        return run_gdb(binary, actions, args=args, breakpoint=breakpoint, setup=setup)[0]
    from qemu_user import qemu_user
    _, emulator, _, options = CROSS[row.arch]
    sysroot, setup = _sysroot(row)
    with qemu_user(emulator, binary, args, sysroot=sysroot, options=options) as address:
        return run_gdb(binary, actions, args=(), breakpoint=breakpoint, setup=NATIVE + QEMU_SETUP + setup,
                       gdb_program="gdb-multiarch", remote=address, timeout=300)[0]


def _sysroot(row):
    """(qemu's -L, GDB's extra setup): sigstop.c is dynamic, against Debian's armhf cross libc."""
    if row.program != "sigstop.c":
        return None, []
    return SYSROOT, ["set sysroot %s" % SYSROOT, "handle SIGUSR1 nostop noprint pass"]


def _frames(payload=None):
    return dict(limit=FRAME_LIMIT, **(payload or {}))


def truth_frames(row, twin) -> List[dict]:
    """GDB's own frames on the twin with tables, through the anchor function (for a core: on the
    running program it was made from)."""
    if row.program == "jit.c":
        return None             # taken in the same session as the columns (see _jit_truth)
    if row.core:
        row = replace(row, core=False)
    if row.program == "sigstop.c":
        addresses = run_at_row(row, twin, [("stop_here", "py", "int(gdb.parse_and_eval('(long)&stop_here'))"),
                                     ("restorer", "py", "int(gdb.parse_and_eval('$lr'))")], breakpoint="*handler")
        return shadow_truth(addresses, twin, row.anchor, _in_function(twin, row.arch, addresses["stop_here"]))
    results = run_at_row(row, twin, [("off", "cmd", "disable unwinder global unwind-plugin"),
                               ("truth", "frames", _frames())])
    return _through(results["truth"], row.anchor)


def _through(frames, anchor):
    names = [f.get("name") or f.get("function") for f in frames]
    if anchor not in names:
        raise AssertionError("no %s among the truth's frames: %s" % (anchor, names))
    return frames[:names.index(anchor) + 1]


STEP_OUT = ("[gdb.execute('finish', to_string=True) for _ in range(2)] and "
            "next((i for i in range(400) if (gdb.execute('stepi', to_string=True), "
            "gdb.find_pc_line(gdb.selected_frame().pc()).symtab)[1] is not None), None)")


def gdb_columns(row, binary) -> Dict[str, list]:
    actions = [("off", "cmd", "disable unwinder global unwind-plugin"),
               ("gdb_alone", "frames", _frames()),
               ("on", "cmd", "enable unwinder global unwind-plugin"),
               ("gdb_default", "frames", _frames()),
               ("fallback", "cmd", "set unwind fallback on"),
               ("flush", "cmd", "maintenance flush register-cache"),
               ("gdb_fallback", "frames", _frames()),
               ("gdb_walk", "json", "unwind backtrace -json"),
               ("fallback_off", "cmd", "set unwind fallback off")]
    if row.program == "jit.c":
        actions += [("off2", "cmd", "disable unwinder global unwind-plugin"),
                    ("stepped", "py", STEP_OUT),
                    ("tail", "frames", _frames())]
    results = run_at_row(row, binary, actions)
    out = {name: results[name] for name in ("gdb_alone", "gdb_default", "gdb_fallback")}
    out["gdb_walk"] = results["gdb_walk"]["frames"]
    if row.program == "jit.c":
        assert results["stepped"] is not None, "did not step out of the JIT code"
        alone = results["gdb_alone"]
        jit = next(i for i, f in enumerate(alone) if f["name"] is None)
        out["truth"] = alone[:jit + 1] + _through(results["tail"], row.anchor)
    return out


@dataclass
class RowResult:
    row: str
    truth: int
    counts: Dict[str, Optional[int]] = field(default_factory=dict)
    pcs_only: bool = False      # the truth has pcs only (qemu's shadow call stack): shown "N†"


def run_row(row: Row) -> Tuple[RowResult, dict]:
    """The row's counts, and every column's frames (for the test's assertions)."""
    twin, binary = binaries(row)
    columns = gdb_columns(row, binary)
    truth = columns.pop("truth", None) or truth_frames(row, twin)
    from matrix_lldb import lldb_columns
    columns.update(lldb_columns(row, binary))
    ranges = function_ranges(twin, row.arch)
    result = RowResult(row.name, len(truth), pcs_only=truth[0]["sp"] is None)
    if result.pcs_only:
        in_function = _in_function(twin, row.arch, truth[0]["pc"])
        count = by_pc = lambda frames: right_pcs(frames, truth, in_function)       # noqa: E731
    else:
        bias = _pie_bias(truth, ranges)
        count = lambda frames: right_frames(frames, truth, ranges, bias)   # noqa: E731
        by_pc = lambda frames: right_by_pc(frames, truth, ranges, bias)    # noqa: E731
    for key, _ in COLUMNS:
        frames = columns.get(key)
        result.counts[key] = None if frames is None else count(frames)
    if "lldb22_bt" in columns:      # qemu-user rows: LLDB 22's bt as loaded, in the same session
        result.counts["lldb22_bt"] = by_pc(columns["lldb22_bt"])
    columns["truth"] = truth
    return result, columns


# -- the table in docs/matrix.md --------------------------------------------------------------------

def save(results: List[RowResult]) -> None:
    """Write the rows run, keeping the last results of the rows not run now (a `-k` run), in rows() order."""
    BUILD.mkdir(parents=True, exist_ok=True)
    by_name = {r["row"]: r for r in (json.loads(RESULTS.read_text()) if RESULTS.exists() else [])}
    by_name.update({r.row: asdict(r) for r in results})
    RESULTS.write_text(json.dumps([by_name[row.name] for row in rows() if row.name in by_name], indent=1))


def save_provider_count(row: Row, count: int) -> None:
    """Keep LLDB 22's `bt` count of one row (right frames by pc) for the table's provider column."""
    BUILD.mkdir(parents=True, exist_ok=True)
    saved = json.loads(PROVIDER_RESULTS.read_text()) if PROVIDER_RESULTS.exists() else {}
    saved[row.name] = count
    tmp = PROVIDER_RESULTS.with_suffix(".tmp%d" % os.getpid())
    tmp.write_text(json.dumps(saved, indent=1))
    tmp.rename(PROVIDER_RESULTS)


def table(results: List[dict], provider: Dict[str, int]) -> str:
    head = "| program | frames | " + " | ".join(title for _, title in COLUMNS) + " | %s |" % PROVIDER_COLUMN
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 3)]
    for r in results:
        cells = ["—" if r["counts"].get(k) is None else "%d" % r["counts"][k] for k, _ in COLUMNS]
        loaded = r["counts"].get("lldb22_bt", provider.get(r["row"]))
        cells.append("—" if loaded is None else "%d" % loaded)
        truth = "%d%s" % (r["truth"], "†" if r.get("pcs_only") else "")
        lines.append("| %s | %s | %s |" % (r["row"], truth, " | ".join(cells)))
    return "\n".join(lines)


def update_readme(results: List[dict]) -> None:
    provider = json.loads(PROVIDER_RESULTS.read_text()) if PROVIDER_RESULTS.exists() else {}
    text = README.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit("docs/matrix.md has no matrix markers (%s ... %s)" % (BEGIN, END))
    README.write_text(pattern.sub(lambda _: "%s\n%s\n%s" % (BEGIN, table(results, provider), END), text))


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-readme"]:
        raise SystemExit("usage: python tests/helpers/matrix.py --update-readme")
    if not RESULTS.exists():
        raise SystemExit("no %s: run `pytest tests/gdb/test_matrix.py` first" % RESULTS)
    update_readme(json.loads(RESULTS.read_text()))
    print("docs/matrix.md: matrix table updated from %s" % RESULTS)
