"""`unwind backtrace --json`'s frames written straight from the walk's frames.

explain.backtrace_json builds a dict for each frame and dump_json encodes
each dict: for a 10,000-frame walk that is a quarter of the command. Most
frames of a deep stack differ only in their numbers (level, pc, CFA, sp):
the rest of their JSON line is the same for every frame with the same
method, function, module, found-by words and signal mark. So the rest is
made once per such key, by explain.frame_json and the C encoder, and each
frame's line is its numbers put in front of it with one format.

A frame with more than those fields (LLDB's own view, inline or tail-call
frames, a claim) is encoded whole from explain.frame_json. The first line
of every key is checked against json.dumps(frame_json(frame)); if it
differs (frame_json changed its first fields), that key is never shortened.
tests/lldb/test_lldb_lines.py compares the whole text with
dump_json(explain.backtrace_json(...)) on real walks.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

from plugin.render import explain

NUMBERS = explain.FRAME_NUMBERS
HEAD = "{" + ", ".join('"%s": %%s' % name for name in NUMBERS) + ", "


class FrameLines:
    """Encodes the frames of one walk (one arch) as the lines dump_json writes for them."""

    def __init__(self, arch) -> None:
        self.arch = arch
        self._tails: Dict[Tuple, Optional[str]] = {}     # key -> the line after its numbers; None: encode whole

    def lines(self, frames) -> List[str]:
        tails, out = self._tails, []
        for frame in frames:
            if frame.native is not None or frame.inline_frames or frame.tail_calls or frame.claimed:
                out.append(json.dumps(explain.frame_json(frame, self.arch)))
                continue
            key = (frame.method, frame.function, frame.module, explain.found_by(frame), frame.signal_frame)
            tail = tails.get(key, False)
            if tail is False:
                tail = tails[key] = self._tail(frame)
            if tail is None:
                out.append(json.dumps(explain.frame_json(frame, self.arch)))
                continue
            level, pc, cfa, at = explain.frame_numbers(frame, self.arch)
            out.append(HEAD % (level, pc, "null" if cfa is None else cfa, "null" if at is None else at) + tail)
        return out

    def _tail(self, frame) -> Optional[str]:
        """The part of frame's JSON line after its numbers, if the line is HEAD % numbers + it."""
        data = explain.frame_json(frame, self.arch)
        if tuple(data)[:len(NUMBERS)] != NUMBERS or len(data) == len(NUMBERS):
            return None
        rest = json.dumps({key: value for key, value in data.items() if key not in NUMBERS})[1:]
        whole = json.dumps(data)
        numbers = tuple("null" if data[name] is None else data[name] for name in NUMBERS)
        return rest if HEAD % numbers + rest == whole else None
