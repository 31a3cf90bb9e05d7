"""`unwind backtrace`'s text written straight from the walk's frames.

explain.backtrace_text renders each frame's line from scratch. A frame's
line is "#LEVEL  0xPC in " and then words that are the same for every frame
with the same function, module, found-by words and signal mark; so those
words are rendered once per such key, by explain.frame_line itself, and
each frame's line is its level and pc put in front of them. A frame with
inline or tail-call frames goes through explain.frame_line and
explain.virtual_line as backtrace_text does. The first line of every key is
checked against explain.frame_line; if it differs (frame_line changed its
head), that key is never shortened. tests/lldb/test_lldb_lines.py
compares the whole text with explain.backtrace_text on real walks.
"""
from __future__ import annotations

from typing import Optional

from plugin.render import explain


def backtrace_text(bt, arch) -> str:
    """explain.backtrace_text(bt, arch), the same text."""
    width = 2 * arch.address_size
    head = "#%%-3d 0x%%0%dx in " % width
    shown, tails, lines = bt.shown, {}, []
    for frame in bt.frames:
        if frame.inline_frames or frame.tail_calls:
            lines.extend(explain.frame_line(frame, width) if virtual is None
                         else explain.virtual_line(virtual, frame, width)
                         for level, virtual in explain.levels_of(frame) if shown is None or level in shown)
            continue
        if shown is not None and frame.level not in shown:
            continue
        key = (frame.function, frame.module, explain.found_by(frame), frame.signal_frame)
        tail = tails.get(key, False)
        if tail is False:
            tail = tails[key] = _tail(frame, head, width)
        lines.append(explain.frame_line(frame, width) if tail is None else head % (frame.level, frame.pc) + tail)
    lines.append(explain.stop_text(bt))
    return "\n".join(lines)


def _tail(frame, head: str, width: int) -> Optional[str]:
    """The part of frame's line after its level and pc, if the line is head % (level, pc) + it."""
    line = explain.frame_line(frame, width)
    start = head % (frame.level, frame.pc)
    return line[len(start):] if line.startswith(start) else None
