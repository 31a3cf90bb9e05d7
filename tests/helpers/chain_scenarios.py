"""Where the live tests stop tests/fixtures/chain.c, declared once for GDB and LLDB.

tests/gdb/test_gdb_unwinder.py and tests/lldb/test_lldb_commands.py walk the
stack at these stops; json_snapshots.py records the plugin's JSON output at
the same stops. Each scenario is (argv, breakpoint, setup commands before
the run, what to do after the first stop).
"""

from gdb_actions import SIGNAL as GDB_SIGNAL

BUILDS = {
    "O0": ["-O0"],
    "O2": ["-O2"],
    "O2-nofp": ["-O2", "-fomit-frame-pointer"],
}

# LLDB stops at SIGUSR1 by default; the handler must run for stop_here to be reached.
LLDB_SIGNAL = ["process handle SIGUSR1 -s false -p true -n false"]

# After the stop: GDB commands.
GDB_SCENARIOS = {
    "plain": (["plain"], "stop_here", [], []),
    "alloca": (["alloca", "40"], "stop_here", [], []),
    "realign": (["realign", "24"], "stop_here", [], []),        # DRAP: DW_CFA_def_cfa_expression
    "signal": (["signal"], "stop_here", GDB_SIGNAL, []),
    "qsort-callback": (["qsort"], "stop_here", [], []),
    "libc-breakpoint": (["qsort"], "getpid", [], []),             # stopped inside libc, under a callback
    "plt": (["qsort"], "sort_some", [], ["break *'qsort@plt'", "continue"]),
    "thread": (["thread"], "stop_here", [], []),
    "vdso": (["vdso"], "read_clock", [], ["break __vdso_clock_gettime", "continue"]),
}

# The PLT stub of qsort in the executable (LLDB calls it a trampoline symbol "qsort").
_PLT_BREAK = ("command('breakpoint set --address 0x%x' % next(s.GetStartAddress().GetLoadAddress(target) "
              "for s in target.GetModuleAtIndex(0).symbols "
              "if s.GetName() == 'qsort' and s.GetType() == lldb.eSymbolTypeTrampoline))")

# After the stop: lldb_driver.py actions.
LLDB_SCENARIOS = {
    "plain": (["plain"], "stop_here", [], []),
    "alloca": (["alloca", "40"], "stop_here", [], []),
    "realign": (["realign", "24"], "stop_here", [], []),          # DRAP: DW_CFA_def_cfa_expression
    "signal": (["signal"], "stop_here", LLDB_SIGNAL, []),
    "qsort": (["qsort"], "stop_here", [], []),                      # libc frames, inlined msort_with_tmp
    "libc-breakpoint": (["qsort"], "getpid", [], []),               # stopped inside libc, under a callback
    "plt": (["qsort"], "sort_some", [], [("plt", "py", _PLT_BREAK), ("go", "cmd", "continue")]),
    "recurse": (["recurse", "1000"], "stop_here", [], []),
    "thread": (["thread"], "stop_here", [], []),
    "vdso": (["vdso"], "read_clock", [], [("vdso", "cmd", "breakpoint set --name __vdso_clock_gettime"),
                                          ("go", "cmd", "continue")]),
}
