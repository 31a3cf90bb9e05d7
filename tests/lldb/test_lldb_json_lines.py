"""`unwind backtrace --json` written from the walk's frames (lldb_commands/json_lines.py) is,
character for character, what the dict form gives: dump_json of explain.backtrace_json of the
same walk (the object plugin.api returns). Cases: a recursion at -O0 and without frame pointers,
a signal handler (a signal frame's line), JIT code (a frame without a module), every thread,
a count, the outermost frames, other sources, and real Debian programs (python3, bash)."""

import pytest

from lldbrun import run_lldb
from support import build

# The dict form of the same command line: BacktraceCommand.run, as plugin.api calls it.
DICT_FORM = ("(lambda c: __import__('lldb_commands.base', fromlist=['_']).dump_json(c.run("
             "__import__('plugin.commands.options', fromlist=['_']).parse_lldb(c.spec, %r, c.state.sources), "
             "lldb.SBExecutionContext(thread))[0]))"
             "(__import__('lldb_commands.commands', fromlist=['_']).BacktraceCommand(debugger, None))")

CASES = {   # name: (program, args, breakpoint, the options after "unwind backtrace")
    "recurse-O0": (lambda: build("chain.c", ["-O0"]), ["recurse", "200"], "stop_here", "--json"),
    "recurse-O2-nofp-count": (lambda: build("chain.c", ["-O2", "-fomit-frame-pointer"]), ["recurse", "50"],
                              "stop_here", "--json -c 7"),
    "signal-O0-outermost": (lambda: build("chain.c", ["-O0"]), ["signal"], "stop_here", "--json -- -4"),
    "thread-O2-all": (lambda: build("chain.c", ["-O2"]), ["thread"], "stop_here", "--json all"),
    "jit-O0-fp": (lambda: build("jit.c", ["-O0"]), [], "stop_here", "--json --sources frame-pointer"),
    "python3": (lambda: "/usr/bin/python3", ["-c", "print(sum(range(10)))"], "write", "--json"),
    "bash": (lambda: "/bin/bash", ["-c", "f() { echo hi; }; f"], "write", "--json"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_written_json_is_the_dict_forms_text(case):
    program, args, breakpoint, options = CASES[case]
    results, _ = run_lldb(program(), [
        ("printed", "cmd", "unwind backtrace " + options),
        ("dict", "py", DICT_FORM % options),
    ], args=args, breakpoint=breakpoint)
    printed = results["printed"]
    assert printed["ok"], printed
    assert '"frames": [\n  {"level": ' in printed["output"], printed["output"][:500]
    assert printed["output"].rstrip("\n") == results["dict"]
