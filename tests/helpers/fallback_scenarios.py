"""The stripped chain.c scenarios the GDB and LLDB fallback tests share
(tests/gdb/test_fallback_gdb.py, tests/lldb/test_lldb_fallback.py): builds
without .eh_frame, the program's modes, and which fallback source should
have found each frame; jit.c, whose code runs in no module."""

from support import NO_EH, build

STRIP = [["objcopy", *NO_EH, "{out}"]]
BUILDS = {"O0": ["-O0"], "O2-nofp": ["-O2", "-fomit-frame-pointer"]}
SCENARIOS = {
    "plain": ["plain"],
    "recurse": ["recurse", "30"],
    "alloca": ["alloca", "40"],
    "realign": ["realign", "24"],
    "qsort": ["qsort"],               # libc's qsort (no frame pointers) between our frames
    "thread": ["thread"],             # ends at clone3
}
# Where walks end: the program's entry, or a thread's clone3 (None: libc without
# debug symbols, where the scan ends at the top of the thread's stack).
OUTERMOST_FUNCTIONS = ("_start", "clone3", "__clone3", "clone", "__clone", None)
# alloca and stack realignment need a frame pointer whatever the flags say.
NEED_FRAME_POINTER = ("with_alloca", "realign")


def stripped(flags_name):
    return build("chain.c", BUILDS[flags_name], name="chain-noeh-%s" % flags_name, post=STRIP)


def is_subsequence(needles, haystack):
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def expected_method(frames, level, flags_name):
    """How the plugin should have found frame `level`: it depends on its callee, frame level-1.

    Our -O0 functions keep frame records: frame-pointer, as long as the
    callee's rbp is known (a frame scanned out of libc, which may reuse rbp,
    has none). At -O2 -fomit-frame-pointer they keep none: scan, except
    below the innermost frame when the breakpoint is at a function's first
    instruction, where the frame-pointer source reads the return address at
    [rsp]. libc keeps no frame pointers on Debian 12: scan.
    """
    callee = frames[level - 1]
    ours = callee["module"] and callee["module"].startswith("chain-noeh")
    keeps_frame_pointer = flags_name == "O0" or callee["function"] in NEED_FRAME_POINTER
    if ours and keeps_frame_pointer and "rbp" in callee["registers"]:
        return "frame-pointer"
    if ours and level == 1:
        return "frame-pointer"
    return "scan"


def describe(frames):
    """A frame list as a short failure message."""
    return [(hex(f["pc"]), hex(f["sp"]) if f.get("sp") is not None else None, f["function"], f.get("method"))
            for f in frames]


# -- code with no module (tests/fixtures/jit.c) ----------------------------------------

JIT_BUILDS = {"O0": ["-O0"], "O2-nofp": ["-O2", "-fomit-frame-pointer"]}


def jit_frame(frames):
    """(index, frame) of the one frame in the JIT code the program copied to an anonymous mapping."""
    found = [f for f in frames if f["function"] and f["function"].startswith("<jit code in ")]
    assert len(found) == 1, describe(frames)
    return frames.index(found[0]), found[0]
