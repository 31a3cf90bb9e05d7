"""LLDB conventions (issue 13 item 3): GDB's positional count, `bt all`, help and completion.

What each version can do: LLDB 16 has raw Python commands only, so its help
says "Expects 'raw' input" and only subcommand names complete; LLDB 19
(parsed commands) prints real syntax lines and completes option names;
LLDB 22 also asks the plugin to complete option values and arguments
(source names, setting names, on/off, "all"). The oracle for `all` is
LLDB's own thread list and frames.
"""

from lldbrun import run_lldb, version
from support import build

COMPLETE = ("(lambda m: (debugger.GetCommandInterpreter().HandleCompletion(%r, %d, 0, -1, m), "
            "[m.GetStringAtIndex(i) for i in range(1, m.GetSize())])[1])(lldb.SBStringList())")
LINES = {
    "subcommand": "unwind back",
    "option": "unwind backtrace --s",
    "source": "unwind backtrace --sources cfi,s",
    "setting": "unwind settings max",
    "setting_value": "unwind settings sources cfi,fr",
    "switch": "unwind provider of",
    "level_all": "unwind explain a",
}
EXPECTED = {    # version -> what completes
    16: {"subcommand": ["backtrace"]},
    19: {"subcommand": ["backtrace"], "option": ["--sources"]},
    22: {"subcommand": ["backtrace"], "option": ["--sources"], "source": ["cfi,sframe", "cfi,scan"],
         "setting": ["max-frames"], "setting_value": ["cfi,frame-pointer"], "switch": ["off"], "level_all": ["all"]},
}
THREADS = "[(t.GetIndexID(), t.GetThreadID(), t.GetFrameAtIndex(0).GetPC()) for t in process]"


def test_positional_count_all_threads_help_and_completion():
    actions = [("full", "json", "unwind backtrace --json"),
               ("three", "json", "unwind backtrace --json 3"),
               ("count", "json", "unwind backtrace --json -c 3"),
               ("outermost", "json", "unwind backtrace --json -- -2"),
               ("all", "json", "unwind backtrace --json all 2"),
               ("all_text", "cmd", "unwind backtrace all"),
               ("threads", "py", THREADS),
               ("help", "cmd", "help unwind backtrace")]
    actions += [(name, "py", COMPLETE % (line, len(line))) for name, line in LINES.items()]
    results, _ = run_lldb(build("chain.c", ["-O2"]), actions, args=["thread"])
    full = results["full"]["frames"]
    assert len(full) > 3
    assert results["three"]["frames"] == results["count"]["frames"] == full[:3]
    assert results["outermost"]["frames"] == full[-2:]
    # `all`: one backtrace per thread LLDB lists, each from that thread's innermost frame.
    threads = results["all"]["threads"]
    assert [(t["thread"], t["tid"], t["frames"][0]["pc"]) for t in threads] == \
        [tuple(t) for t in results["threads"]], (threads, results["threads"])
    assert len(threads) == 2 and all(1 <= len(t["frames"]) <= 2 for t in threads)
    assert results["all"]["frames"] == full[:2]         # the selected thread's, as without `all`
    text = results["all_text"]["output"]
    for index, tid, _ in results["threads"]:
        assert "thread #%d, tid = %d" % (index, tid) in text, text
    help_text = results["help"]["output"]
    if version() >= 19:
        assert "Syntax: backtrace <cmd-options>" in help_text and "Expects 'raw' input" not in help_text
        assert "-s <name> ( --sources <name> )" in help_text, help_text
    else:       # LLDB 16: raw commands only; the declared usage line stands in the help's body
        assert "Syntax: backtrace\n" in help_text and "Expects 'raw' input" in help_text, help_text
        assert "Usage: unwind backtrace [--json] [--sources LIST] [--count N] [all] [N|-N]" in help_text
    expected = EXPECTED[min(EXPECTED, key=lambda v: abs(v - version()))]
    for name in LINES:
        assert results[name] == expected.get(name, []), (name, results[name])
