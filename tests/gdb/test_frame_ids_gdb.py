"""gdb_unwinder.frame_ids inside GDB: the frame ids a walk hands GDB keep growing outward, raised
only from a frame whose CFA lies below its callee's id on (a kernel's exception stack: the whole
boot is tests/realworld/test_orc_nmi.py); per thread, and forgotten at every epoch."""
import json
import subprocess
from pathlib import Path

from support import need_tool

REPO = Path(__file__).resolve().parents[2]
CODE = r"""
import json
from gdb_unwinder.frame_ids import FrameIds
ids, a, b = FrameIds(), object(), object()
sp = lambda thread, level, cfa: int(ids.frame_id(thread, level, cfa, 0x1000).sp)
walk = [sp(a, level, cfa) for level, cfa in enumerate([0x100, 0x200, 0x300, 0x400, 0x50, 0x90, 0x150])]
again = sp(a, 5, 0x90)
other = [sp(b, 0, 0x40), sp(b, 1, 0x30)]
gap = sp(b, 3, 0x60)        # level 2 not the plugin's: the raise of level 1 goes on
inward = sp(b, 5, 0x10)     # level 4 not the plugin's (GDB's signal trampoline frame): no new raise
raised = ids.raised
notes = [ids.note(a, 3), ids.note(a, 4)]    # for `unwind explain`: none where the id is the CFA
ids.clear()
print("FRAME-IDS " + json.dumps({"walk": walk, "again": again, "other": other, "gap": gap, "inward": inward, "raised": raised,
                                 "notes": notes, "cleared": sp(a, 5, 0x90)}))
"""


def test_frame_ids_grow_outward_and_rise_only_past_an_inward_step():
    out = subprocess.run([need_tool("gdb"), "-nx", "-batch", "-ex", "source %s" % (REPO / "gdb_unwinder/gdbinit.py"),
                          "-ex", "python exec(%r)" % CODE], capture_output=True, text=True, timeout=120).stdout
    line = [l for l in out.splitlines() if l.startswith("FRAME-IDS ")]
    assert line, out
    got = json.loads(line[0][len("FRAME-IDS "):])
    # unchanged while CFAs grow; at 0x50 (below 0x400) raised to 0x400 + 16, and every frame after by as much
    assert got["walk"] == [0x100, 0x200, 0x300, 0x400, 0x410, 0x450, 0x510]
    assert got["again"] == 0x450
    assert got["raised"] == 7         # levels 4, 5, 6, 5 again of the first thread; 1, 3, 5 of the other
    assert got["other"] == [0x40, 0x40 + 16] and got["gap"] == 0x60 + 0x20
    assert got["inward"] == 0x10 + 0x20
    assert got["cleared"] == 0x90
    assert got["notes"][0] is None and got["notes"][1].startswith("0x410, 0x3c0 above this frame's CFA")
