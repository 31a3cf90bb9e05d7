"""The corrupted-stack cases, their expected stop reasons, and how to read a result.

Debugger-neutral (no tests here): tests/gdb/test_termination_gdb.py runs them in
GDB, and the LLDB tests can run the same table with `unwind backtrace
--sources LIST`. Every case is tests/fixtures/corrupt.c built with
CORRUPT_FLAGS, run with the mode's arguments to its breakpoint at stop_here,
then walked with each source list below.

Why each reason is the right one:

  zero-ra        damage() overwrote its return address with 0: every source
                 reads the 0 and the walk ends with pc-zero after damage().
  self-fp        self_fp()'s saved rbp points at its own record. main (its
                 caller) is still right, but main's rbp is now self_fp's
                 record, below main's sp: CFI (main's CFA = rbp+16) and the
                 frame-pointer chain both stop with cfa-not-increasing.
                 Scanning finds main's return address anyway and goes on.
  data-ra        damage()'s return address points at a global: CFI and the
                 frame pointer read it and the engine refuses it:
                 return-address-not-code. Scanning skips it and goes on.
  unmapped-fp    damage()'s saved rbp points into an unmapped page: the
                 caller (unmapped_fp) is right, its own frame record cannot
                 be read: unreadable-memory. Scanning goes on.
  misaligned-sp  call_misaligned calls stop_here with rsp 3 bytes off. The
                 tables describe the frames fine (outermost); the frame
                 pointer and the scanner refuse a misaligned stack:
                 misaligned-stack.
  deep           100,000 recursive calls on a thread: the walk stops at
                 the default max-frames (20000) with depth-limit, and with
                 `max-frames 200000` reaches clone3 (outermost).

With a table source first, the fallbacks are not asked once a table that
covers the frame has failed a check (plugin/engine.py step_frame): the
reason is the table's, not a guess past the damage.
"""

import re

CORRUPT_FLAGS = ["-O0", "-fno-omit-frame-pointer"]

TABLES = "cfi,frame-pointer,scan"      # the default order: tables first, then the fallbacks
FP = "frame-pointer"
FP_SCAN = "frame-pointer,scan"
SOURCE_LISTS = (TABLES, FP, FP_SCAN)

# mode -> (program arguments, {source list: (stop reason, function of the last frame)})
CASES = {
    "zero-ra": (["zero-ra"], {TABLES: ("pc-zero", "damage"),
                              FP: ("pc-zero", "damage"),
                              FP_SCAN: ("pc-zero", "damage")}),
    "self-fp": (["self-fp"], {TABLES: ("cfa-not-increasing", "main"),
                              FP: ("cfa-not-increasing", "main"),
                              FP_SCAN: ("outermost", "_start")}),
    "data-ra": (["data-ra"], {TABLES: ("return-address-not-code", "damage"),
                              FP: ("return-address-not-code", "damage"),
                              FP_SCAN: ("outermost", "_start")}),
    "unmapped-fp": (["unmapped-fp"], {TABLES: ("unreadable-memory", "unmapped_fp"),
                                      FP: ("unreadable-memory", "unmapped_fp"),
                                      FP_SCAN: ("outermost", "_start")}),
    "misaligned-sp": (["misaligned-sp"], {TABLES: ("outermost", "_start"),
                                          FP: ("misaligned-stack", "stop_here"),
                                          FP_SCAN: ("misaligned-stack", "stop_here")}),
    "deep": (["deep", "100000"], {TABLES: ("depth-limit", "recurse"),
                                  FP: ("depth-limit", "recurse"),
                                  FP_SCAN: ("depth-limit", "recurse")}),
}

# The deep case again with room for every frame: (max-frames, {sources: (reason, last function)}).
# The thread's last frame is clone3; "??" where libc's debug symbols are not installed.
THREAD_END = ("clone3", "__clone3", "clone", "__clone", "??")
DEEP_FULL = (200000, {TABLES: ("outermost", THREAD_END), FP_SCAN: ("outermost", THREAD_END)})
DEEP_FRAMES = 100000 + 5        # recurse x 100001, deep_thread, start_thread, clone3, stop_here

# Seconds a whole debugger session of one case may take (it usually takes a few).
SESSION_SECONDS = {"deep": 300}
DEFAULT_SESSION_SECONDS = 120

_FRAME_LINE = re.compile(r"#(\d+)\s+0x[0-9a-f]+ in (.+?)(?: from \S+)?  \[found by: (.*)\]")
_STOP_LINE = re.compile(r"Backtrace stopped: ([a-z-]+)[: ]")


def summarize(text):
    """{frames, last_function, last_found_by, reason} from `unwind backtrace` text."""
    lines = text.strip().splitlines()
    frames = [m for m in map(_FRAME_LINE.match, lines) if m]
    stop = next((m for m in map(_STOP_LINE.match, reversed(lines)) if m), None)
    return {"frames": len(frames),
            "last_function": frames[-1].group(2) if frames else None,
            "last_found_by": frames[-1].group(3) if frames else None,
            "reason": stop.group(1) if stop else None}
