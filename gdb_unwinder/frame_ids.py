"""GDB's frame ids for the frames the plugin claims, kept from going inward.

GDB ends a backtrace where a normal frame's id lies inner to its callee's
("previous frame inner to this frame"); only a signal trampoline's caller
may do that (an alternate signal stack), and every frame a Python unwinder
gives is a normal frame. A kernel's exception stacks (NMI, #DB, #MC, #DF:
the cpu_entry_area) lie above the stacks they interrupt, so the frame an NMI
interrupted has a CFA below the NMI entry code's, and GDB's own `bt` ended
there while the kernel's unwinder goes on. So from a frame whose CFA lies
below the id the plugin gave its callee on, the ids of the walk are raised
(by the same amount, so they still grow outward): 16 above that id, and
every frame further out by as much. Past a frame GDB gave itself (its
signal trampoline frame, whose caller may lie inward) no raise starts. A
frame id is GDB's name for a frame, used to find it again; only `info
frame`'s "frame at" shows it. The registers handed over, sp among them, are
the frame's own, unchanged.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from .compat import FrameId

RAISED_ABOVE = 16       # a raised id lies this far above its callee's
LOOK_BELOW = 4          # levels looked down for a raise in force (inline frames are not asked about)
BOUND = 8192            # ids kept at most (cleared when full)
TOP = (1 << 64) - 1


class FrameIds:
    """The frame ids given at this stop, per thread and level: cleared whenever the unwinder's epoch moves."""

    def __init__(self) -> None:
        self._threads: Dict[object, Dict[int, Tuple[int, int]]] = {}    # thread -> level -> (id's stack, raised by)
        self.raised = 0         # frames given a raised id since the last clear

    def clear(self) -> None:
        self._threads.clear()
        self.raised = 0

    def note(self, thread: object, level: int) -> Optional[str]:
        """Where the id of the frame at `level` of `thread` lies, where it was raised at this stop (for
        `unwind explain`), else None."""
        stack, by = self._threads.get(thread, {}).get(level, (0, 0))
        if not by:
            return None
        return ("0x%x, 0x%x above this frame's CFA: past a stack switch inward (an NMI's) the walk's ids are "
                "raised, as GDB ends a walk whose ids go inward; `info frame` shows it as \"frame at\"; the "
                "registers are the frame's own" % (stack, by))

    def frame_id(self, thread: object, level: int, cfa: int, start: int):
        """The FrameId of the frame at `level` of `thread` whose CFA is `cfa` and function `start`."""
        given = self._threads.get(thread)
        if given is None or len(given) >= BOUND:
            given = self._threads[thread] = {}
        below = given.get(level - 1)
        callee = below is not None      # the frame one level in is the plugin's: only then may ids rise
        if not callee:
            # an inline frame between (not asked about), or GDB's own frame: a raise in force goes on,
            # none starts (GDB lets a signal trampoline's caller lie inward: an alternate signal stack)
            below = next(filter(None, map(given.get, range(level - 2, level - 2 - LOOK_BELOW, -1))), None)
            if below is None:
                given[level] = (cfa, 0)
                return FrameId(cfa, start)
        stack, by = below
        if callee and cfa + by < stack:
            by = stack + RAISED_ABOVE - cfa
        if by:
            self.raised += 1
            stack = min(cfa + by, TOP)
        else:
            stack = cfa
        given[level] = (stack, by)
        return FrameId(stack, start)
