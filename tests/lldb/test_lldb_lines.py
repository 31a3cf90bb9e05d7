"""`unwind backtrace` written from the walk's frames (lldb_commands/json_lines.py, text_lines.py)
is, character for character, what the renderers give for the same walk: with --json, dump_json
of explain.backtrace_json (the object plugin.api returns); without, explain.backtrace_text
(tests/lldb/lines_reference.py builds both inside LLDB). Cases: a recursion at -O0 and without
frame pointers, a signal handler (a signal frame's line), JIT code (a frame without a module),
every thread, a count, the outermost frames, other sources, and real Debian programs (python3,
bash)."""

import re

import pytest

from lldbrun import run_lldb
from support import ROOT, build

REFERENCE = "__import__('runpy').run_path(%r)['%%s'](debugger, thread, %%r)" % str(
    ROOT / "tests" / "lldb" / "lines_reference.py")

CASES = {   # name: (program, args, breakpoint, the options after "unwind backtrace")
    "recurse-O0": (lambda: build("chain.c", ["-O0"]), ["recurse", "200"], "stop_here", ""),
    "recurse-O2-nofp-count": (lambda: build("chain.c", ["-O2", "-fomit-frame-pointer"]), ["recurse", "50"],
                              "stop_here", "-c 7"),
    "signal-O0-outermost": (lambda: build("chain.c", ["-O0"]), ["signal"], "stop_here", "-- -4"),
    "thread-O2-all": (lambda: build("chain.c", ["-O2"]), ["thread"], "stop_here", "all"),
    "jit-O0-fp": (lambda: build("jit.c", ["-O0"]), [], "stop_here", "--sources frame-pointer"),
    "python3": (lambda: "/usr/bin/python3", ["-c", "print(sum(range(10)))"], "write", ""),
    "bash": (lambda: "/bin/bash", ["-c", "f() { echo hi; }; f"], "write", ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_written_backtrace_is_the_renderers_text(case):
    program, args, breakpoint, options = CASES[case]
    json_options = ("--json " + options).strip()
    results, _ = run_lldb(program(), [
        ("json", "cmd", "unwind backtrace " + json_options),
        ("json_reference", "py", REFERENCE % ("json_reference", json_options)),
        ("text", "cmd", ("unwind backtrace " + options).strip()),
        ("text_reference", "py", REFERENCE % ("text_reference", options)),
    ], args=args, breakpoint=breakpoint)
    printed, text = results["json"], results["text"]
    assert printed["ok"] and text["ok"], (printed, text)
    assert '"frames": [\n  {"level": ' in printed["output"], printed["output"][:500]
    assert printed["output"].rstrip("\n") == results["json_reference"]
    assert re.search(r"^#\d+ +0x[0-9a-f]{16} in ", text["output"], re.M) and "Backtrace stopped: " in text["output"], \
        text["output"][:500]
    assert text["output"].rstrip("\n") == results["text_reference"]
