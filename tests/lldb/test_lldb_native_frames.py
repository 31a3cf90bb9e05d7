"""LLDB's own frames grouped into physical frames by their stack, not by the inlined flag alone.

LLDB (16, 19 and 22) flags glibc's _IO_new_file_xsputn inlined when a large
fwrite calls write through it (tests/fixtures/fwrite_big.c, stopped at
`write`), yet lists no concrete frame of it after that: the next frame,
_IO_fwrite, has another CFA and sp. Folding the flagged frame into
_IO_fwrite (the old rule) shifted every level above it by one, so `unwind
compare` reported most frames as disagreeing and `frame select` of that
frame walked from the wrong one.

Oracle: LLDB's own SBFrames (pc, sp, CFA of each), grouped by stack as
lldbrun.physical() does; the plugin's walk must match them frame for frame.
"""

from lldbrun import physical, run_lldb
from support import build

SELECT_LONE = ("[thread.SetSelectedFrame(i).GetFrameID() for i in range(thread.GetNumFrames()) "
               "if (thread.GetFrameAtIndex(i).GetFunctionName() or '').endswith('_IO_new_file_xsputn')][:1]")


def _lone_inlined(frames):
    """Indices of frames flagged inlined whose next frame is on another stack."""
    return [i for i, (f, after) in enumerate(zip(frames, frames[1:]))
            if f["inlined"] and (f["cfa"], f["sp"]) != (after["cfa"], after["sp"])]


def test_inlined_frame_without_a_concrete_frame_is_a_physical_frame():
    binary = build("fwrite_big.c", ["-O0", "-g"])
    steps = [("frames", "frames", None),
             ("ours", "json", "unwind backtrace --json"),
             ("compare", "json", "unwind compare --json"),
             ("select", "py", SELECT_LONE),
             ("selected", "py", "thread.GetSelectedFrame().GetFrameID()"),
             ("from_selected", "json", "unwind backtrace --json")]
    results, transcript = run_lldb(binary, steps, breakpoint="write")
    frames = results["frames"]
    lone = _lone_inlined(frames)
    assert lone, "LLDB flags no frame inlined without a concrete frame here (libc6-dbg missing?): %s" % frames
    assert frames[lone[0]]["function"].endswith("_IO_new_file_xsputn"), frames
    assert results["select"] == [lone[0]] and results["selected"] == lone[0]
    theirs = physical(frames)
    ours = results["ours"]["frames"]
    # Every physical frame of LLDB's is the plugin's, at the same level.
    assert [(f["pc"], f["sp"]) for f in ours][:len(theirs)] == [(f["pc"], f["sp"]) for f in theirs], (ours, theirs)
    assert [f["function"] for f in ours][-4:-1] == ["main", "__libc_start_call_main", "__libc_start_main_impl"]
    # `unwind compare` agrees wherever LLDB has a frame. (LLDB 19 stops after
    # _IO_fwrite, with a CFA of 0x10010 there: those levels are LLDB's gap.)
    rows = results["compare"]["frames"]
    assert all(row["agrees"] for row in rows if row["native"]), results["compare"]["summary"]
    assert len([row for row in rows if row["native"]]) == len(theirs)
    # Walking from the selected frame starts at that frame, at its physical level.
    level = [i for i, f in enumerate(theirs) if f["pc"] == frames[lone[0]]["pc"]]
    first = results["from_selected"]["frames"][0]
    assert level and first["level"] == level[0] and first["pc"] == frames[lone[0]]["pc"], (first, level)
