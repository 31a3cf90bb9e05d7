"""Debian 12's own armhf, i386 and arm64 programs as the oracle (issue 33, item 6).

tests/setup_debian_sysroots.sh unpacks Debian's armhf coreutils, bash and
libc6 into /opt/unwind-sysroots/armhf (their code ships .ARM.exidx, no
.debug_frame). Each program runs under `qemu-arm -L SYSROOT -g PORT` and
gdb-multiarch stops it at a libc function it calls; the plugin's walk
(`unwind backtrace -json`) must equal GDB's own frames, (pc, sp) frame by
frame, as far as GDB goes, and GDB's `bt` with the plugin loaded must show
every frame GDB alone shows. The programs have no .symtab, so `main` is
nameless and GDB's own walk stops in the program's code (frame 1 to 6).
Beyond GDB the oracle is a shadow call stack (tests/helpers/shadow_stack.py:
qemu's log of the blocks it ran, replayed up to the first entry into the
breakpoint's function, each call pushing its return address and each return
popping it): the plugin's frames must equal it whole, to the process's
first frame (the program's `_start`, or ld.so's when the stop is in the
loader), and it must itself equal GDB's frames as far as GDB goes.

i386 runs natively under GDB, the sysroot's ld.so loading the program with
the sysroot's libc (--library-path); the program is added to GDB as a
symbol file at its load address so GDB reads its .eh_frame. There GDB's
walk reaches __libc_start_main and the program's _start, and the plugin's
must equal it whole, and so must GDB's bt with the plugin loaded.

arm64 runs under `qemu-aarch64 -L SYSROOT -g PORT`: Debian's arm64 programs
and libc carry .eh_frame, GDB's walk reaches __libc_start_main and _start,
and the plugin's must equal it whole, and so must GDB's bt with the plugin.

python3 (Debian's python3.11, no .symtab, no unwind table on armhf) runs
`-c 'print(1)'` to its write, on each architecture. A signal handler:
coreutils' timeout stopped in the kill its SIGALRM handler makes (arm64
without SVE, whose signal frame GDB cannot read under qemu; on armhf GDB's
walk past the signal frame is the oracle once the frame carries the magic
Linux writes and qemu does not: test_armhf_signal_handler).
"""
import shlex

from plugin.arch import arm as arm_arch

import pytest

from debian_sysroot import sysroot as _sysroot
from gdb_actions import CLAIMED, native_frames
from gdbrun import run_gdb
from qemu_arm import qemu_arm
from qemu_user import qemu_user
from shadow_stack import shadow_stack
from support import need_tool

# name: (program, arguments, breakpoint)
STOPS = {
    "sort-write": ("usr/bin/sort", ["/etc/hostname"], "write"),
    "sort-malloc": ("usr/bin/sort", ["/etc/hostname"], "malloc"),
    "ls-write": ("bin/ls", ["/"], "write"),
    "cat-write": ("bin/cat", ["/etc/hostname"], "write"),
    "ptx-qsort": ("usr/bin/ptx", ["/etc/passwd"], "qsort"),
    "bash-write": ("bin/bash", ["-c", "echo hi"], "write"),
    "bash-malloc": ("bin/bash", ["-c", "echo hi"], "malloc"),
    "python3-write": ("usr/bin/python3.11", ["-c", "print(1)"], "write"),
    # a signal handler: timeout's SIGALRM handler (cleanup) sends the child SIGTERM, interrupting sigsuspend
    "timeout-kill": ("usr/bin/timeout", ["0.2", "sleep", "5"], "kill"),
}
# GDB passes the signals timeout lives by (its alarm, its child's end) to the program without stopping
SIGNALS = "handle SIGALRM SIGCHLD nostop noprint pass"
# python3.11 on armhf: GDB stops at frame 1 (its prologue analyser: "previous frame identical");
# past it the plugin's walk reads the code of the static functions no symbol names forward from
# each return address to its returns, and must equal the shadow stack whole.
# Not in the armhf walk test: timeout's signal handler (test_armhf_signal_handler below), whose
# oracle past the signal frame is GDB's once the signal frame carries the kernel's magic; the shadow
# stack, from a second run that forks too, sees the alarm land elsewhere.
NOT_ON_ARMHF = ("timeout-kill",)


def _hex(addresses):
    return " ".join("%#x" % a for a in addresses)


def _bt(results):
    return [line for line
                 in results.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("stop", sorted(set(STOPS) - set(NOT_ON_ARMHF)))
def test_armhf_walk_equals_gdb(stop):
    sysroot = _sysroot("armhf")
    program, args, breakpoint = STOPS[stop]
    binary = sysroot / program
    setup = ["set sysroot %s" % sysroot, "set breakpoint pending on", SIGNALS]
    with qemu_arm(binary, args, sysroot=sysroot) as address:
        results, transcript = run_gdb(binary, [
            ("entry", "py", 'int(gdb.parse_and_eval("(long)&%s")) & 0xffffffff' % breakpoint),
            ("ours", "json", "unwind backtrace -json"),
            ("bt", "cmd", "bt"),
            *native_frames(),
            ("bt-native", "cmd", "bt"),
        ], breakpoint=breakpoint, setup=setup, gdb_program="gdb-multiarch", remote=address, timeout=300)
    _check(stop, results, transcript)
    # beyond GDB: the return addresses qemu saw called and not yet returned to (tests/helpers/shadow_stack.py)
    entry = results["entry"]
    oracle = shadow_stack(need_tool("qemu-arm"), sysroot, binary, args, entry)
    assert oracle is not None, "qemu never entered %s at %#x" % (breakpoint, entry)
    oracle = [address for address, _ in oracle]
    ours = [f["pc"] & ~1 for f in results["ours"]["frames"][1:]]
    native = [f["pc"] & ~1 for f in results["native"][1:]]
    print("%s: shadow stack %s; GDB %s; ours %s" % (stop, _hex(oracle), _hex(native), _hex(ours)))
    assert oracle[:len(native)] == native, transcript      # the oracle agrees with GDB where GDB goes
    assert ours == oracle, transcript


# qemu-arm writes uc_flags 0 in a signal frame where Linux writes this magic; GDB without it reads
# the frame as the pre-2.6.18 layout and finds a wrong caller. Written in, GDB's walk is the oracle.
SIGFRAME_MAGIC = 0x5ac3c35a
SIGTRAMP_FRAME = 4                 # gdb.SIGTRAMP_FRAME
# in GDB's frame 2 (selected, the restorer's: GDB's sigtramp unwinder's, or the plugin's where it claimed it
# because GDB's misreads qemu's frame, gdb_unwinder/sigtramp.py): the magic written at its sp, and its code
WRITE_MAGIC = ('[code for f in [gdb.selected_frame()] '
               'for code in [bytes(gdb.selected_inferior().read_memory(f.pc(), 8)).hex()] '
               'if gdb.execute("set {int}%%d = %#x" %% int(f.read_register("sp"))) is None]' % SIGFRAME_MAGIC)


def test_armhf_signal_handler():
    """timeout's SIGALRM handler (no table, no symbol) stopped in its kill: the plugin's walk reads
    the handler's code forward to its `pop {..., pc}`, which returns to glibc's restorer (the
    handler was entered with lr = the restorer, no call), and goes on through the signal frame
    (the restorer's exidx entry) to sigsuspend, main and _start; the plugin's walk is taken first.
    GDB alone stops at the handler ("previous frame identical"). The oracle past it: GDB's own
    walk once the signal frame carries the kernel's magic, where the plugin gives GDB three frames
    (kill's caller, which GDB alone finds the same; the handler's: the restorer, a signal frame
    GDB's sigtramp unwinder recognises; main's, whose code has no table) and GDB's own unwinders
    find the others: the interrupted __libc_do_syscall, sigsuspend, main, __libc_start_main, _start."""
    sysroot = _sysroot("armhf")
    program, args, breakpoint = STOPS["timeout-kill"]
    binary = sysroot / program
    setup = ["set sysroot %s" % sysroot, "set breakpoint pending on", SIGNALS]
    with qemu_arm(binary, args, sysroot=sysroot) as address:
        results, transcript = run_gdb(binary, [
            ("ours", "json", "unwind backtrace -json"),
            # GDB's frames, cached while the plugin walked, end at the handler until flushed
            ("flush-walk", "cmd", "maint flush register-cache"),
            ("frame", "cmd", "frame 2"),
            ("magic", "py", WRITE_MAGIC),
            ("before", "py", CLAIMED),
            ("flush", "cmd", "maint flush register-cache"),
            ("gdb", "frames", None),
            ("after", "py", CLAIMED),
            ("bt", "cmd", "bt"),
            *native_frames(),
        ], breakpoint=breakpoint, setup=setup, gdb_program="gdb-multiarch", remote=address, timeout=300)
    ours = [(f["pc"], f["sp"]) for f in results["ours"]["frames"]]
    native = [(f["pc"], f["sp"]) for f in results["native"]]
    walk = [(f["pc"], f["sp"]) for f in results["gdb"]]
    print("timeout-kill: GDB alone %d frames, GDB with the signal frame's magic %d, ours %d: %s" % (
        len(native), len(walk), len(ours), " <- ".join("%s(%s)" % (f.get("function"), f.get("method"))
                                                      for f in results["ours"]["frames"])))
    assert len(results["magic"]) == 1, transcript            # GDB's frame 2 is a signal frame
    restorer = results["magic"][0]
    assert ours[:len(native)] == native, transcript           # as far as GDB alone goes
    # the plugin gave GDB three frames: kill's caller (libc's exidx; GDB alone finds the same), the
    # handler's (the restorer) and main's (__libc_start_call_main, the one caller of main); GDB's own
    # unwinders found the other five, through the signal frame to main and below it to _start
    assert results["after"] - results["before"] == 3, transcript
    assert results["gdb"][2]["type"] == SIGTRAMP_FRAME, transcript
    # the restorer's code is one of glibc's sigreturn trampolines the plugin knows
    assert any(restorer.startswith(s.code.hex()) for s in arm_arch.ARCH.sigreturns), transcript
    assert any((f["name"] or "").startswith("__libc_start_main") for f in results["gdb"]), transcript
    assert ours == walk, transcript
    assert results["ours"]["frames"][2]["method"] == "analysis", transcript    # read forward


def _check(stop, results, transcript, whole=False):
    """whole: GDB's own walk goes to the outermost frame, so the plugin's must end there too."""
    native = results["native"]
    ours = results["ours"]["frames"]
    truth = [(f["pc"], f["sp"]) for f in native]
    right = sum(1 for a, b in zip([(f["pc"], f["sp"]) for f in ours], truth) if a == b)
    print("%s: %d of GDB's %d frames right; ours: %s" % (
        stop, right, len(truth), " <- ".join("%s(%s)" % (f.get("function"), f.get("method")) for f in ours)))
    # GDB reads libc's .ARM.exidx down to the program's own nameless code (no .symtab: main is ??)
    assert len(native) >= 2, transcript
    assert [(f["pc"], f["sp"]) for f in ours[:len(truth)]] == truth, transcript
    # GDB's bt with the plugin loaded shows every frame GDB alone shows, the same
    alone = _bt(results["bt-native"])
    assert _bt(results["bt"])[:len(alone)] == alone, transcript
    if whole:
        assert len(ours) == len(truth) and _bt(results["bt"]) == alone, transcript
        # the process's first frame: past __libc_start_main to _start, or ld.so's _start (a stop in the loader)
        names = [f["name"] or "" for f in native]
        assert any(n.startswith("__libc_start_main") for n in names) or "_dl_start" in names, transcript


def _link_base(path):
    """The lowest PT_LOAD address of an ELF file, page-aligned (0 for a PIE)."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        loads = [s["p_vaddr"] for s in ELFFile(handle).iter_segments() if s["p_type"] == "PT_LOAD"]
    return min(loads) & ~0xfff


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_i386_walk_equals_gdb(stop):
    """i386 runs natively: the sysroot's own ld.so loads the program with the sysroot's libc."""
    sysroot = _sysroot("i386")
    program, args, breakpoint = STOPS[stop]
    loader = sysroot / "lib/ld-linux.so.2"
    libraries = "%s:%s" % (sysroot / "lib/i386-linux-gnu", sysroot / "usr/lib/i386-linux-gnu")
    # GDB's file is ld.so, which maps the program itself: GDB holds no objfile for it (no
    # .eh_frame read) until it is added at its load address, the first mapping of the file
    # (less the file's own link address: python3.11 is not PIE, linked at 0x8048000)
    add = ('gdb.execute("add-symbol-file -o 0x%%x %s" %% (int(next(line.split()[0] for line in '
           'gdb.execute("info proc mappings", to_string=True).splitlines() if line.endswith("%s")), 16) - %d))'
           % (sysroot / program, program, _link_base(sysroot / program)))
    results, transcript = run_gdb(loader, [
        ("add", "py", add),
        ("ours", "json", "unwind backtrace -json"),
        ("bt", "cmd", "bt"),
        *native_frames(),
        ("bt-native", "cmd", "bt"),
    ], args=["--library-path", libraries, str(sysroot / program), *map(shlex.quote, args)], breakpoint=breakpoint,
        setup=["set breakpoint pending on", SIGNALS], timeout=300)
    _check(stop, results, transcript, whole=True)


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_arm64_walk_equals_gdb(stop):
    """arm64 under qemu-aarch64: GDB reads the programs' and libc's .eh_frame to _start (past main:
    bash exports `main`, where GDB's bt would stop)."""
    sysroot = _sysroot("arm64")
    program, args, breakpoint = STOPS[stop]
    binary = sysroot / program
    # no SVE: GDB 13 cannot read the signal frame of qemu's SVE vector length ("Invalid vector length")
    with qemu_user("qemu-aarch64", binary, args, sysroot=sysroot, options=("-cpu", "max,sve=off")) as address:
        results, transcript = run_gdb(binary, [
            ("ours", "json", "unwind backtrace -json"),
            ("bt", "cmd", "bt"),
            *native_frames(),
            ("bt-native", "cmd", "bt"),
        ], breakpoint=breakpoint, setup=["set sysroot %s" % sysroot, "set breakpoint pending on",
                                         "set backtrace past-main on", SIGNALS],
            gdb_program="gdb-multiarch", remote=address, timeout=300)
    _check(stop, results, transcript, whole=True)
