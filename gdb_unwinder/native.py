"""GDB's own view of the stack: physical frames and registers of the selected frame."""

import gdb

from .compat import frame_level, invalidate_cached_frames


def physical_frames(limit):
    """[{pc, sp, function}] from the newest frame outwards, physical frames only.

    Inline frames share their caller's physical frame, and tail-call frames
    are GDB's reconstruction of calls that left no frame on the stack, so
    both are left out: the plugin recovers physical frames only.
    """
    out = []
    try:
        frame = gdb.newest_frame()
    except gdb.error:
        return out
    while frame is not None and len(out) < limit:
        try:
            if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
                sp = int(frame.read_register("sp"))
                function = frame.name()
                out.append({"pc": frame.pc(), "sp": sp, "function": function,
                            "signal_frame": frame.type() == gdb.SIGTRAMP_FRAME})
            frame = frame.older()
        except gdb.error:
            break
    return out


def native_frames(state, limit):
    """GDB's frames computed with the plugin's unwinder switched off, then switched back."""
    unwinder = state.unwinder
    was = unwinder.enabled if unwinder else False
    selected = _selected_level()
    # GDB stops at main and at the entry point by default; the plugin does
    # not, so compare like with like.
    past = {name: gdb.parameter(name) for name in ("backtrace past-main", "backtrace past-entry")}
    try:
        if unwinder:
            unwinder.enabled = False
        for name in past:
            gdb.execute("set %s on" % name, to_string=True)
        invalidate_cached_frames()
        return physical_frames(limit)
    finally:
        for name, value in past.items():
            gdb.execute("set %s %s" % (name, "on" if value else "off"), to_string=True)
        if unwinder:
            unwinder.enabled = was
        invalidate_cached_frames()
        _select_level(selected)


def _selected_level():
    try:
        return frame_level(gdb.selected_frame())
    except gdb.error:
        return None


def _select_level(level):
    if not level:
        return
    try:
        frame = gdb.newest_frame()
        for _ in range(level):
            frame = frame.older()
        if frame is not None:
            frame.select()
    except gdb.error:
        pass


def innermost_registers(arch, frame=None):
    """(registers by DWARF number, exact_pc) of a GDB frame (the selected one by default)."""
    frame = frame or gdb.selected_frame()
    while frame.type() in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME) and frame.older() is not None:
        frame = frame.older()
    registers = {}
    for number, name in arch.registers.items():
        try:
            value = frame.read_register(name)
        except (gdb.error, ValueError):
            continue
        if value.is_optimized_out:
            continue
        try:
            registers[number] = int(value) & arch.mask
        except (gdb.error, ValueError):
            continue
    registers[arch.pc] = frame.pc()
    return registers, _exact_pc(frame), frame_level(frame)


def _exact_pc(frame):
    """Is frame's pc exact (not a return address)? True for the innermost physical frame
    (only inline frames newer than it: they share its pc) and for a frame a signal interrupted."""
    newer = frame.newer()
    while newer is not None and newer.type() == gdb.INLINE_FRAME:
        newer = newer.newer()
    return newer is None or newer.type() == gdb.SIGTRAMP_FRAME
