"""The runtime matrix under LLDB (tests/helpers/runtime_stops.py): at each stop the
plugin's walk (`unwind backtrace --json`) is LLDB's own physical frames (pc and
sp) up to the outermost frame LLDB gets right, and ends there as outermost.

Oracle: LLDB's own SBFrames, grouped into physical frames by lldbrun.physical().
"""

import pytest

from lldbrun import physical, run_lldb
from runtime_stops import PROGRAMS, STOPS, truth_length

NAMES = ("{str(f['pc']): target.ResolveLoadAddress(f['pc']).GetSymbol().GetName() or '' "
         "for f in results['frames']}")


def _stop_actions(stop):
    """(breakpoint, actions) that bring LLDB to the stop."""
    actions = []
    breakpoint = stop.breakpoint
    if stop.breakpoint is None:         # run to a signal: pass SIGSEGV to the program's handler
        breakpoint = "main"
        actions += [("handle", "cmd", "process handle SIGSEGV --stop false --pass true --notify false"),
                    ("go", "cmd", "process continue")]
    actions += [("skip%d" % i, "cmd", "process continue") for i in range(stop.extra.get("skip_hits", 0))]
    if "then" in stop.extra:
        actions += [("then", "cmd", "breakpoint set --name %s" % stop.extra["then"]),
                    ("go", "cmd", "process continue")]
    return breakpoint, actions


@pytest.mark.parametrize("name", sorted(STOPS))
def test_runtime_stop_walk_matches_lldb(name, lldb_version):
    stop = STOPS[name]
    binary = PROGRAMS[stop.program]()
    breakpoint, actions = _stop_actions(stop)
    actions += [("frames", "frames", None), ("names", "py", NAMES), ("ours", "json", "unwind backtrace --json")]
    results, transcript = run_lldb(binary, actions, args=stop.args, breakpoint=breakpoint,
                                   setup=stop.lldb_setup)
    theirs = physical(results["frames"])
    names = [results["names"].get(str(f["pc"]), "") for f in theirs]
    count = truth_length(names, stop.lldb_truth_ends or stop.truth_ends)
    assert count >= 3, (names, transcript[-2000:])
    ours = results["ours"]
    assert [(f["pc"], f["sp"]) for f in ours["frames"]] == [(f["pc"], f["sp"]) for f in theirs[:count]], (
        ours["frames"], theirs[:count])
    assert ours["stop_reason"] == stop.ends_by, ours
