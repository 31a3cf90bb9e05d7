"""GDB's frame levels for the plugin's physical frames.

GDB's `bt` numbers inline frames (code inlined into a function) and
tail-call frames (calls that left by a jump, rebuilt from DW_TAG_call_site)
as frames of their own. Neither needs an unwind step: an inline frame runs
in the physical frame it is inlined into, and a tail-call frame's own frame
was reused by its callee. So the plugin walks physical frames and numbers
them as GDB does: GDB's frames from the walk's first frame are read in
step, grouped as [inline frames..., physical frame, tail-call frames...],
and each of the plugin's frames takes the levels of GDB's group with the
same pc. Where GDB's frames end or disagree (past `main`, or where the
plugin found frames GDB did not), levels go on counting, with inline frames
taken from the debug information's blocks at the lookup pc.

GDB's frames are read only as far as the plugin's walk goes, one group per
physical frame, so a walk that stops early costs GDB no more unwinding.
"""

import gdb

from plugin.arch import reader
from plugin.model.evidence import VirtualFrame, VirtualKind

from .compat import frame_level

_PHYSICAL_OVER = (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME)


class GdbLevels:
    """Places the plugin's physical frames at GDB's levels, one frame at a time, walk order."""

    def __init__(self, first):
        self._gdb = first               # the next GDB frame to read (None: GDB's frames ended)
        self._next_level = frame_level(first)
        self._in_step = True            # GDB's groups still match the plugin's frames

    def place(self, frame):
        """Set frame.level, frame.inline_frames and frame.tail_calls; returns frame's last level."""
        group = self._group() if self._in_step else None
        if group is not None and group[1].pc() != frame.pc:
            group, self._in_step = None, False
        if group is None:
            self._from_blocks(frame)
        else:
            inline, physical, tails = group
            frame.inline_frames = [_virtual(f, _kind(f)) for f in inline]
            frame.level = frame_level(physical)
            frame.tail_calls = [_virtual(f, _kind(f)) for f in tails]
        last = frame.levels[-1]
        self._next_level = last + 1
        return last

    def _group(self):
        """GDB's next ([inline frames], physical frame, [tail-call frames, and inline frames over them])."""
        inline = []
        try:
            frame = self._gdb
            # Inline frames; at a walk's start (a selected tail-call frame) tail-call frames too.
            while frame is not None and frame.type() in _PHYSICAL_OVER:
                inline.append(frame)
                frame = frame.older()
            if frame is None:
                return None
            physical, tails = frame, []
            frame = frame.older()
            while frame is not None and frame.type() in _PHYSICAL_OVER and _tail_group(frame):
                tails.append(frame)
                frame = frame.older()
            self._gdb = frame
        except gdb.error:           # GDB could not unwind further: levels go on from the blocks
            self._gdb = None
            return None
        return inline, physical, tails

    def _from_blocks(self, frame):
        lookup = frame.pc if frame.exact_pc or frame.signal_frame else frame.pc - 1
        names = inlined_functions(lookup)
        level = self._next_level
        frame.inline_frames = [VirtualFrame(level + i, VirtualKind.INLINE, frame.pc, name)
                               for i, name in enumerate(names)]
        frame.level = level + len(names)
        frame.tail_calls = []


def _tail_group(frame):
    """Is an INLINE or TAILCALL frame after a physical one part of its tail calls?
    Inline frames belong there only when a tail-call frame, not a physical one, follows them."""
    while frame is not None and frame.type() == gdb.INLINE_FRAME:
        frame = frame.older()
    return frame is not None and frame.type() == gdb.TAILCALL_FRAME


def _kind(frame):
    return VirtualKind.TAIL_CALL if frame.type() == gdb.TAILCALL_FRAME else VirtualKind.INLINE


def _virtual(frame, kind):
    return VirtualFrame(frame_level(frame), kind, frame.pc(), frame.name())


def inlined_functions(pc):
    """Names of the functions inlined at pc, innermost first (GDB's order): every function
    block around pc but the outermost, which is the physical frame's own function."""
    try:
        block = gdb.block_for_pc(pc)
    except (RuntimeError, gdb.error):
        return []
    names = []
    while block is not None:
        if block.function is not None:
            names.append(block.function.print_name)
        block = block.superblock
    return names[:-1]


def first_gdb_frame():
    """Where a walk from the selected frame starts: the selected frame (inline or not)."""
    return gdb.selected_frame()


def inline_depth(pc, cache):
    """How many inlined-function blocks enclose pc (0 without debug information); cached per pc."""
    depth = cache.get(pc)
    if depth is not None:
        return depth
    try:
        block = gdb.block_for_pc(pc)
    except (RuntimeError, gdb.error):
        block = None
    functions = 0
    while block is not None:
        if block.function is not None:
            functions += 1
        block = block.superblock
    depth = cache[pc] = max(functions - 1, 0)
    return depth


def is_innermost_physical(level, pc, ctx, depths):
    """Is the pending frame at GDB level `level` the thread's innermost physical frame?

    GDB numbers inline frames too: stopped in code inlined into a function,
    levels 0..k-1 are inline frames and the function's own frame is level
    k, whose pc is the stop pc, not a return address. No frame may be
    asked here (GDB is computing the newest frame's id), so the answer
    comes from the blocks at pc: the innermost physical frame has at most
    inline_depth(pc) inline frames below it, while a caller has its callee
    and its own inline frames at pc-1 below it, so level > inline_depth(pc-1).
    Where both could hold (pc starts an inlined block), a return address
    follows a call instruction and a stop pc at a block's start normally
    does not.
    """
    if level == 0:
        return True
    if level > inline_depth(pc, depths):
        return False
    if level <= inline_depth(pc - 1, depths):
        return True
    try:
        return ctx.arch.call_before(reader(ctx.read_memory), pc) is None
    except Exception:           # unreadable code: the caller reading is the safe one
        return False
