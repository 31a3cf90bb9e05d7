"""A signal handler's stop on 32-bit Arm (Thumb-2 and Arm, under qemu-arm) and i386 (native).

tests/fixtures/sigstop.c raises SIGUSR1; its handler calls stop_here, where
GDB stops. Between the handler and `raise` lies the kernel's signal frame
(qemu-user builds the same layout as Linux): the handler returns to glibc's
restorer (`mov r7, #119; svc 0`, or #173 for SA_SIGINFO's rt frame; i386's
vDSO __kernel_sigreturn / __kernel_rt_sigreturn), and the interrupted
registers lie in the sigcontext above it. On the handler's own stack and on
an alternate signal stack (sigaltstack), with sa_handler and SA_SIGINFO:

- i386 (the host's libc, tables kept): the plugin's walk equals GDB's own
  frames, (pc, sp), to main, and GDB's bt with the plugin equals GDB alone.
- Arm: GDB's own walk under qemu-arm goes astray after glibc's restorer, so
  the oracle is qemu's shadow call stack (tests/helpers/shadow_stack.py):
  every frame's pc equals it, to the program's _start. The walk as loaded
  (glibc's restorer has .ARM.exidx entries over the sigcontext) and the walk
  from the code alone (`-sources analysis`: the restorer recognised by its
  `mov.w r7, #119; svc 0`, the registers read from the kernel's layout) give
  the same frames, pc and sp. The fixture is built with -g, then its
  .debug_frame removed (its code and .ARM.exidx are what the plugin reads,
  as on Debian).
"""
import pytest

from gdb_actions import native_frames
from gdbrun import run_gdb
from matrix_signal import arm_sigstop
from qemu_arm import SYSROOT, qemu_arm
from shadow_stack import SIGNAL, shadow_stack
from support import build, need_tool

MODES = {"plain": [], "altstack": ["altstack"], "siginfo": ["siginfo"], "altstack-siginfo": ["altstack", "siginfo"]}
ARM_BUILDS = ("thumb-O2", "arm-O2", "thumb-O0")      # of matrix_signal.ARM_SIGSTOP_BUILDS (the matrix's rows too)
SIGTRAMP_FRAME = 4                   # gdb.SIGTRAMP_FRAME
QUIET = "handle SIGUSR1 nostop noprint pass"
ACTIONS = [("ours", "json", "unwind backtrace -json"), ("bt", "cmd", "bt"), *native_frames(), ("bt-native", "cmd", "bt")]


def _check(results, transcript):
    native, ours = results["native"], results["ours"]["frames"]
    names = [f["name"] for f in native]
    print("GDB: %s\nours: %s" % (" <- ".join(map(str, names)),
                                 " <- ".join("%s(%s)" % (f.get("function"), f.get("method")) for f in ours)))
    assert names[0] == "stop_here" and "main" in names, transcript
    assert any(f.get("type") == SIGTRAMP_FRAME for f in native), transcript
    upto = names.index("main") + 1
    assert [(f["pc"], f["sp"]) for f in ours[:upto]] == [(f["pc"], f["sp"]) for f in native[:upto]], transcript
    bt = [line for line in results["bt"].splitlines() if line.startswith("#")]
    alone = [line for line in results["bt-native"].splitlines() if line.startswith("#")]
    assert bt[:upto] == alone[:upto], transcript


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(ARM_BUILDS))
def test_arm_signal_frame(name, mode):
    """GDB's own walk under qemu-arm goes astray after glibc's restorer (it names the handler
    again, then code that never ran): the oracle is qemu's shadow call stack instead, the signal
    delivered at raise's `svc` standing for the trampoline's frame and the interrupted one."""
    binary = arm_sigstop(name)
    with qemu_arm(binary, MODES[mode], sysroot=SYSROOT) as address:
        results, transcript = run_gdb(binary, [("entry", "py", 'int(gdb.parse_and_eval("(long)&stop_here"))'),
                                               ("code-only", "json", "unwind backtrace -json -sources analysis"),
                                               *ACTIONS], gdb_program="gdb-multiarch", remote=address,
                                      setup=["set sysroot %s" % SYSROOT, QUIET], timeout=300)
    oracle = shadow_stack(need_tool("qemu-arm"), SYSROOT, binary, MODES[mode], results["entry"])
    assert oracle is not None and [kind for _, kind in oracle].count(SIGNAL) == 1, oracle
    ours = results["ours"]["frames"]
    print("ours: %s" % " <- ".join("%s(%s) %#x" % (f.get("function"), f.get("method"), f["pc"]) for f in ours))
    print("oracle: %s" % " ".join("%#x%s" % (a, "(signal)" if k == SIGNAL else "") for a, k in oracle))
    expected = []
    for address, kind in oracle:
        expected += [None, address] if kind == SIGNAL else [address]
    pcs = [f["pc"] & ~1 for f in ours[1:]]
    assert len(pcs) == len(expected), transcript
    at = expected.index(None)
    assert pcs[:at] + pcs[at + 1:] == expected[:at] + expected[at + 1:], transcript
    # with no table at all, the trampoline is recognised by its code (`mov.w r7, #119; svc 0`) and the
    # interrupted registers are read from the kernel's sigcontext
    alone = results["code-only"]["frames"]
    print("code only: %s" % " <- ".join("%s(%s) %#x" % (f.get("function"), f.get("method"), f["pc"]) for f in alone))
    assert [(f["pc"], f["sp"]) for f in alone] == [(f["pc"], f["sp"]) for f in ours], transcript
    assert alone[1 + at]["signal_frame"] and alone[2 + at]["found_by"] == "signal frame (kernel layout)", alone
    # GDB's bt with the plugin loaded: GDB's arm-linux sigtramp unwinder misreads qemu-arm's sigreturn
    # frame (uc_flags 0: gdb_unwinder/sigtramp.py), so where the interrupted frame lies above the
    # handler's (no alternate stack) the plugin claims the restorer's frame (no "<signal handler
    # called>" mark then) and bt goes on through raise to main, where GDB alone goes astray; an
    # rt_sigreturn frame (SA_SIGINFO) GDB reads right, and above an alternate stack GDB would stop at
    # a normal frame's caller inner to it: there bt is GDB alone's
    bt = [line for line in results["bt"].splitlines() if line.startswith("#")]
    alone = [line for line in results["bt-native"].splitlines() if line.startswith("#")]
    print("bt:\n" + "\n".join(bt) + "\nGDB alone:\n" + "\n".join(alone))
    if mode == "plain":
        assert bt[:2] == alone[:2] and "<signal handler called>" in alone[2], transcript
        assert at == 1 and int(bt[2].split()[1], 16) == ours[1 + at]["pc"] & ~1, transcript     # the restorer's
        assert any(" main (" in line for line in bt) and not any(" main (" in line for line in alone), transcript
    else:
        assert bt == alone, transcript


@pytest.mark.parametrize("mode", sorted(MODES))
def test_i386_signal_frame(mode):
    binary = build("sigstop.c", ["-m32", "-O2"], name="sigstop-i386")
    results, transcript = run_gdb(binary, ACTIONS, args=MODES[mode], setup=[QUIET],
                                  timeout=300)
    _check(results, transcript)
