"""chain.c built with `gcc -m32` for the i386 tests in GDB and LLDB: builds, stops, the stripped twin."""

from support import NO_EH, build

BUILDS = {"O0": ["-O0"], "O2": ["-O2"], "O2-nofp": ["-O2", "-fomit-frame-pointer"]}
STRIP = [["objcopy", *NO_EH, "{out}"]]


def stops(signal_setup):
    """name: (program arguments, breakpoint, setup, the innermost function the debugger must show)."""
    return {
        "plain": (["plain"], "stop_here", [], "stop_here"),
        "alloca": (["alloca", "40"], "stop_here", [], "stop_here"),
        "signal": (["signal"], "stop_here", signal_setup, "stop_here"),
        "qsort": (["qsort"], "stop_here", [], "stop_here"),
        "libc": (["qsort"], "getpid", [], "getpid"),      # LLDB names it __getpid
    }


def program(flags_name, post=None, name="chain-i386"):
    return build("chain.c", ["-m32", *BUILDS[flags_name]], name=name, post=post)


def pc_sp(frames):
    return [(f["pc"], f["sp"]) for f in frames]
