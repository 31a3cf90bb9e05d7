"""`bt` ends at the frame the plugin proved outermost, where GDB would walk past it.

GDB stops a backtrace at the program's entry function by its symbol
(`backtrace past-entry off`: the frame whose function starts at the ELF
entry point), or where a table marks the return address undefined (glibc's
`_start` has such CFI). A program that has neither (stripped, its tables
removed, or hand-written entry code without CFI) leaves GDB's prologue
analyser to take `argc`, `argv` and the environment above `_start`'s frame for
return addresses: `#8 0x00007fffffffe7c8 in ?? ()` and more, down to a 0.
The plugin proves that frame outermost from the code itself
(plugin.strategies.process_entry: its pc is the return address of the
first call the entry code makes, and no one called the entry code), but
GDB's Python unwinder API cannot mark a frame outermost (kernel_frames.py
says why), so a frame filter ends `bt` there.

A frame filter makes GDB print every frame of `bt` through Python, which is
slower than GDB's own printing, so ProgramEnd is enabled only where it ends
something: the main thread of a program whose entry GDB has no symbol for
and whose entry code no table GDB reads covers.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, Iterator, Optional, Tuple

import gdb

from plugin.strategies import process_entry

END_NAME = "unwind-plugin-program-end"
FIRST = 1 << 30         # frame filters run from the highest priority: the end comes before other filters


def frames_until(frame, is_end: Callable[[object, int], bool],
                 exact: Optional[Callable[[object, int], bool]] = None) -> Iterator:
    """GDB's frames from `frame` to the first one is_end(frame, its pc) accepts (or GDB's last), each named
    as GDB's own bt names it (gdb.Frame.name(): a caller by its pc - 1), not as FrameDecorator's
    default names a frame without a symbol (by its pc: a return address at the end of a .cold part
    would name the next function); but a frame exact(frame, pc) accepts (an interrupt left it, and
    GDB, which sees a normal frame as its callee, would look it up at pc - 1: at a function's first
    instruction, the padding before it) by its pc. It walks the frames itself, from the newest:
    gdb.FrameIterator asks for a frame's older one before it hands the frame out, which past a frame
    whose caller is not saved raises."""
    from gdb.FrameDecorator import FrameDecorator

    class Named(FrameDecorator):
        def __init__(self, frame, at_pc):
            self._base = frame      # FrameDecorator's own __init__ does only this (one call less a frame)
            self.at_pc = at_pc

        def function(self):
            frame = self.inferior_frame()
            name = _name_at(frame.pc()) if self.at_pc else None
            return name or frame.name() or "??"     # no name: GDB's frame-filter printing leaves it empty

    while frame is not None:
        try:
            pc = frame.pc()
        except gdb.error:
            return      # a frame with no pc: its callee saved none (the way KernelFrames ends a stack)
        yield Named(frame, exact is not None and exact(frame, pc))
        if is_end(frame, pc):
            return      # not asking GDB for the frame past it
        try:
            frame = frame.older()
        except gdb.error:
            # GDB made the older frame, then looked past it (frame_info_to_frame_object asks for its
            # caller) and failed there: the frame's caller is now noted as absent, so asking again
            # gives the frame. A second error is the walk's own: said as GDB's bt says an end, not
            # raised (GDB would print a Python exception).
            try:
                frame = frame.older()
            except gdb.error as exc:
                gdb.write("Backtrace stopped: %s\n" % exc)
                return
        if frame is None:
            return


class EndFilter:
    """A GDB frame filter that ends `bt` at a frame proved outermost: enabled where the user wants it
    (`disable frame-filter global NAME` sets it off) and where active() says it ends something, so
    every other `bt` keeps GDB's own printing. It runs first (the highest priority)."""

    def __init__(self, name: str):
        self.name = name
        self.priority = FIRST
        self.wanted = True

    @property
    def enabled(self) -> bool:
        return self.wanted and self.active()

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.wanted = bool(value)

    def active(self) -> bool:
        raise NotImplementedError


class ProgramEnd(EndFilter):
    """GDB frame filter: a program's `bt` ends at the frame its entry code made (see the module)."""

    def __init__(self, state):
        super().__init__(END_NAME)
        self.state = state
        self._known = (None, ())    # (key, the ends)

    def active(self) -> bool:
        return bool(self.ends())

    def filter(self, frame_iter):
        ends = self.ends()
        if not ends:
            return frame_iter
        return frames_until(gdb.newest_frame(), lambda frame, pc: pc in ends and _a_callers(frame))

    def ends(self) -> Tuple[int, ...]:
        """The return addresses of the first call of the program's and of its dynamic loader's
        entry code where GDB would walk past the frame they end (see the module), for the selected
        thread's stack. The loader's only before the program's libraries are mapped: once the
        program runs, the loader's entry frame is gone from every stack, and the filter would only
        make GDB print every `bt` through Python."""
        try:
            thread = gdb.selected_thread()
            if thread is None or thread.ptid[1] not in (0, thread.ptid[0]):
                return ()       # a thread's stack does not reach the entry code
            if gdb.parameter("backtrace past-entry"):
                return ()
            state = self.state
            if state.claim == "none" or "analysis" not in state.sources:
                return ()
            inferior = state.inferior()
            target = inferior.target
            key = (id(target), target.generation, state.claim, state.sources)
            if self._known[0] != key:
                self._known = (key, self._find(inferior))
            return self._known[1]
        except Exception:       # no process, no target, no frame: nothing to end
            return ()

    def _find(self, inferior) -> Tuple[int, ...]:
        auxv = _auxiliary_vector()
        ctx = self.state.unwinder_context(inferior)
        ctx.modules.refresh()

        def end_of(entry):
            end = None if entry is None else process_entry.first_call_end(ctx, entry)
            if end is None or inferior.coverage.gdb_covers(end - 1, ctx, None) is not None:
                return None     # GDB's DWARF unwinder reads the entry code's row (glibc's: return address undefined)
            return end
        entry, base = auxv.get("AT_ENTRY"), auxv.get("AT_BASE")
        ends = []
        if entry is not None and not _gdb_names(entry):
            ends.append(end_of(entry))
        loader = ctx.modules.find(base) if base else None
        if loader is not None:      # GDB stops at the program's entry function only, never at the loader's
            program = ctx.modules.find(entry) if entry is not None else None
            others = [m for m in ctx.modules.modules if m is not loader and m is not program
                      and m.header_address != auxv.get("AT_SYSINFO_EHDR") and m.name != "[vdso]"]
            if not others:          # no library mapped yet: the program has not started
                ends.append(end_of(process_entry.entry_point(ctx, loader)))
        return tuple(end for end in ends if end is not None)


def _auxiliary_vector() -> Dict[str, int]:
    """The process's auxiliary vector as GDB prints it ({"AT_ENTRY": address, ...}): a live process,
    a core (with or without the executable), a remote target that reads it; {} where there is none."""
    try:
        text = gdb.execute("info auxv", to_string=True)
    except gdb.error:       # no process, or no auxiliary vector
        return {}
    return {found.group(1): int(found.group(2), 16)
            for found in re.finditer(r"^\d+\s+(AT_[A-Z_0-9]+)\s.*?\s(0x[0-9a-fA-F]+)\b", text, re.MULTILINE)}


def _gdb_names(address: int) -> bool:
    """Does GDB have a symbol starting at address (so that it stops at the entry function itself)?"""
    found = _info_symbol(address)
    return found is not None and " + " not in found


def _name_at(pc: int) -> Optional[str]:
    """The function GDB's symbols put at pc itself (its debug information, else its minimal symbols)."""
    try:
        block = gdb.current_progspace().block_for_pc(pc)
    except RuntimeError:
        block = None
    while block is not None and block.function is None:
        block = block.superblock
    if block is not None:
        return block.function.print_name
    found = _info_symbol(pc)
    return found.split(" + ")[0].strip() or None if found is not None else None


def _info_symbol(address: int) -> Optional[str]:
    """`info symbol ADDRESS` up to " in section": "NAME" or "NAME + OFFSET"; None where GDB has none."""
    try:
        text = gdb.execute("info symbol 0x%x" % address, to_string=True)
    except gdb.error:
        return None
    return None if text.startswith("No symbol") else text.split(" in section")[0]


def _a_callers(frame) -> bool:
    """Is frame a caller frame (not the innermost, nor one a signal interrupted: their pc is exact)?"""
    try:
        newer = frame.newer()       # (gdb.Frame.level() is GDB 11's)
        return newer is not None and newer.type() == gdb.NORMAL_FRAME
    except gdb.error:
        return False
