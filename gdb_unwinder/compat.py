"""What differs between the GDB versions the plugin runs on (10.1 to 16.3).

The rest of gdb_unwinder calls these instead of the newer APIs:

- FrameId: gdb.unwinder.FrameId where GDB has it (14 and later), else an
  object with sp and pc, which every GDB accepts.
- pending_level(pending_frame): PendingFrame.level() (GDB 11 and later).
  GDB 10 has none, so the level comes from the order GDB asks for frames
  in: after anything that makes GDB forget its frames (a resume, a memory
  or register write, a new objfile: not a stop, since GDB builds the
  frames it reports a stop in before telling Python), the first frame it
  asks about is the innermost physical one (level: the inline frames at
  its pc), and each new frame after it is the caller of the previous one
  (one more, plus the inline frames at its return address). A frame below
  (sp) every frame seen starts a new walk. Tail-call frames GDB inserts
  are not counted there.
- frame_level(frame): gdb.Frame.level() (GDB 11 and later), else counted
  through Frame.newer().
- connect(name, callback): gdb.events.NAME where this GDB has that event
  (free_objfile only from GDB 13).
- is_native(inferior): Inferior.connection.type == "native" (GDB 11 and
  later). GDB 10 names no target; a process this GDB debugs natively is
  one it traces (ptrace): /proc/PID/status names GDB's own pid as its
  TracerPid. A remote stub's pid (QEMU's gdbstub says 1) and a core's are
  no such process.
- unsupported(): one line saying why this GDB or Python cannot run the
  plugin, or None.
"""
from __future__ import annotations

import os
import sys

import gdb
import gdb.unwinder

MINIMUM_GDB = (10, 1)


class _SpPc:
    """The frame id GDB 13 and older take: any object whose sp and pc are gdb.Values. `special`
    is there (None: no special address) because GDB asks for it, and a missing attribute costs
    GDB an exception per frame."""
    __slots__ = ("sp", "pc")
    special = None

    def __init__(self, sp, pc):
        self.sp = gdb.Value(sp)
        self.pc = gdb.Value(pc)


FrameId = getattr(gdb.unwinder, "FrameId", _SpPc)


def gdb_version():
    """(major, minor) of the running GDB."""
    numbers = []
    for part in gdb.VERSION.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers + [0] * (2 - len(numbers)))


def unsupported():
    """One line saying why the plugin cannot run in this GDB, or None when it can."""
    if sys.version_info < (3, 9):
        return "GDB's Python is %s; the plugin needs Python 3.9 or later" % sys.version.split()[0]
    if gdb_version() < MINIMUM_GDB:
        return "GDB %s is too old; the plugin needs GDB %d.%d or later" % ((gdb.VERSION,) + MINIMUM_GDB)
    return None


def connect(name, callback):
    """Connect callback to gdb.events.NAME; False when this GDB has no such event."""
    registry = getattr(gdb.events, name, None)
    if registry is None:
        return False
    registry.connect(callback)
    return True


class _Walk:
    """The frames GDB asked about in one thread since it last forgot its frames."""
    __slots__ = ("levels", "last", "lowest_sp")

    def __init__(self):
        self.levels = {}            # (pc, sp) -> level
        self.last = -1              # the highest level given
        self.lowest_sp = 1 << 64    # the lowest sp seen


class _Levels:
    """Levels of pending frames and frames where GDB has no level() (GDB 10)."""

    def __init__(self):
        self.pending = {}       # thread ptid -> _Walk
        self.frames = []        # [(gdb.Frame, its pc, level)] recently counted
        self.depths = {}        # pc -> inline depth
        self.connected = False

    def forget(self, event=None):
        self.pending.clear()
        self.frames = []
        self.depths.clear()

    def _connect(self):
        if not self.connected:
            self.connected = True
            for name in ("cont", "exited", "memory_changed", "register_changed", "inferior_call",
                         "new_objfile", "clear_objfiles", "free_objfile"):
                connect(name, self.forget)

    def pending_level(self, pending_frame):
        from .levels import inline_depth
        self._connect()
        pc, sp = int(pending_frame.read_register("pc")), int(pending_frame.read_register("sp"))
        thread = gdb.selected_thread()
        walk = self.pending.get(thread.ptid if thread is not None else None)
        if walk is None or (pc, sp) not in walk.levels and sp < walk.lowest_sp:
            walk = self.pending[thread.ptid if thread is not None else None] = _Walk()  # a new innermost frame
        level = walk.levels.get((pc, sp))
        if level is None:
            if walk.levels:
                level = walk.last + 1 + inline_depth(pc - 1, self.depths)
            else:
                level = inline_depth(pc, self.depths)
            walk.levels[(pc, sp)] = level
            walk.last = max(walk.last, level)
            walk.lowest_sp = min(walk.lowest_sp, sp)
        return level

    def frame_level(self, frame):
        self._connect()
        count, newer = 0, frame
        while newer is not None:
            pc = newer.pc()
            for known, known_pc, level in self.frames:
                # GDB 10 finds an outermost frame equal to its callee: the pc tells them apart
                if known_pc == pc and known == newer:
                    return self._remember(frame, level + count)
            newer = newer.newer()
            count += 1
        return self._remember(frame, count - 1)

    def _remember(self, frame, level):
        self.frames = [(frame, frame.pc(), level)] + self.frames[:7]
        return level


_levels = _Levels()


# GDB's own methods where it has them, called unbound (the unwinder asks for every frame)
if hasattr(gdb.PendingFrame, "level"):
    pending_level = gdb.PendingFrame.level          # GDB's level of a pending frame
else:
    pending_level = _levels.pending_level
if hasattr(gdb.Frame, "level"):
    frame_level = gdb.Frame.level                   # GDB's level of a gdb.Frame
else:
    frame_level = _levels.frame_level


def invalidate_cached_frames():
    """gdb.invalidate_cached_frames(), and forget the levels counted where GDB has no level()."""
    _levels.forget()
    gdb.invalidate_cached_frames()


def is_native(inferior) -> bool:
    """Is inferior a process this GDB runs or attached to on this machine (not a remote stub or a core)?"""
    if hasattr(inferior, "connection"):
        connection = inferior.connection
        return connection is not None and connection.type == "native"
    return inferior.pid > 0 and _traced_by_us(inferior.pid)


def _traced_by_us(pid: int) -> bool:
    try:
        with open("/proc/%d/status" % pid) as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        pass
    return False
