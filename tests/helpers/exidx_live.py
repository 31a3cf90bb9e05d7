"""The planted EHABI program of the live `unwind validate` tests (GDB and LLDB, under qemu-arm).

tests/fixtures/validate_planted_exidx.S (Arm code, a wrong `.save`, `.pad` and `.setfp`, or with
-DCORRECT their twin) called once each from validate_planted_exidx_main.c, built Thumb-2 and static."""

from support import FIXTURES, build, need_tool
from validate_support import without_labels

ARM = "arm-linux-gnueabihf-"
# each function the program calls, in order, and its planted error (bad_N_begin..bad_N_end)
CALLS = (("save_wrong", 12), ("pad_wrong", 13), ("setfp_wrong", 14))


def programs(correct):
    """(program with the bad_N labels, the same without local symbols: a debugger would take a label
    for a function)."""
    flags = ["-O1", "-mthumb", "-static", "-funwind-tables", str(FIXTURES / "validate_planted_exidx.S")]
    labelled = build("validate_planted_exidx_main.c", flags + (["-DCORRECT"] if correct else []),
                     name="validate_exidx_live_%s" % ("twin" if correct else "planted"),
                     compiler=need_tool(ARM + "gcc"))
    return labelled, without_labels(labelled, need_tool(ARM + "objcopy"))
