"""LLDB's frame numbers for the plugin's physical frames.

LLDB's `bt` lists an inlined call as a frame of its own and a tail call
(rebuilt from DW_TAG_call_site) as an artificial frame; neither needs an
unwind step (native.py says how LLDB's frames group into physical ones).
The plugin walks physical frames and numbers them as LLDB does: LLDB's
groups from the walk's first frame are read in step, and each of the
plugin's frames takes the numbers of the group with the same pc: its inline
frames before it, the concrete frame's number as its own level, the
artificial frames after it as its tail calls. Where LLDB's frames end or
disagree (the plugin found frames LLDB did not), levels go on counting.
A walk that starts at a selected artificial frame numbers it, and any
frames between it and the next physical frame, before that physical frame,
as GDB's levels do.
"""
from __future__ import annotations

from typing import Iterator, Optional

from plugin.model.evidence import Frame, VirtualFrame, VirtualKind

from . import native


class LldbLevels:
    """Places the plugin's physical frames at LLDB's frame numbers, one frame at a time, walk order."""

    def __init__(self, thread, first: native.Physical, selected_index: Optional[int] = None):
        self._thread = thread
        self._groups: Iterator[native.Physical] = native.physical(thread)
        self._pending = None
        for group in self._groups:
            if group.indices == first.indices:
                self._pending = group
                break
        self._first = self._pending
        self._selected = first.indices[0] if selected_index is None else min(selected_index, first.indices[0])
        self._next_level = self._selected
        self._in_step = True

    def place(self, frame: Frame) -> int:
        """Set frame.level, frame.inline_frames and frame.tail_calls; returns frame's last level."""
        group = self._next_group() if self._in_step else None
        if group is not None and group.first.GetPC() != frame.pc:
            group, self._in_step = None, False
        if group is None:
            frame.inline_frames, frame.level, frame.tail_calls = [], self._next_level, []
        else:
            before = list(range(self._selected, group.indices[0])) if group is self._first else []
            frame.inline_frames = [self._virtual(i) for i in before + group.indices[:-1]]
            frame.level = group.indices[-1]
            frame.tail_calls = [self._virtual(i) for i in group.tails]
        last = frame.levels[-1]
        self._next_level = last + 1
        return last

    def _next_group(self) -> Optional[native.Physical]:
        """LLDB's next physical group, from the walk's first one on (None where LLDB's frames end)."""
        if self._pending is not None:
            group, self._pending = self._pending, None
            return group
        return next(self._groups, None)

    def _virtual(self, index: int) -> VirtualFrame:
        sbframe = self._thread.GetFrameAtIndex(index)
        kind = VirtualKind.TAIL_CALL if sbframe.IsArtificial() else VirtualKind.INLINE
        return VirtualFrame(index, kind, sbframe.GetPC(), sbframe.GetFunctionName())
