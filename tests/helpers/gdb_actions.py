"""Steps many GDB tests take (actions for gdbrun.run_gdb), each declared once.

An action is (name, kind, payload); see gdb_driver.py for the kinds.
"""

# How many frames the plugin's unwinder has given GDB so far.
CLAIMED = "gdb._unwind_plugin_state.unwinder.claimed"
# Why it left frames to GDB (with `set unwind claim auto`).
DECLINES = "[r for _, _, r in gdb._unwind_plugin_state.unwinder.declines]"
# Whether it declines every frame of the selected inferior unseen (GDB reads every table it has).
LEAVES_ALL = "gdb._unwind_plugin_state.unwinder.leaves_all_to_gdb()"
# Make it look at every frame and say why it declines each (DECLINES), as it does where it may add.
LOOK_AT_EACH = "python gdb._unwind_plugin_state.unwinder.may_be_quiet = False; gdb.invalidate_cached_frames()"
DISABLE = "disable unwinder global unwind-plugin"
SIGNAL = ["handle SIGUSR1 nostop noprint pass"]      # the handler runs, GDB does not stop at SIGUSR1


def claimed(name="claimed"):
    """The count of frames claimed so far, stored under `name`."""
    return (name, "py", CLAIMED)


def claim_all(name="all"):
    """`set unwind claim all`: GDB's bt takes every frame the plugin can give."""
    return (name, "cmd", "set unwind claim all")


def native_frames(name="native", frames=None):
    """The plugin's unwinder disabled, then GDB's own frames (the oracle) under `name`."""
    return [("disable", "cmd", DISABLE), (name, "frames", frames)]


def claimed_then_native(frames="enabled", count=None, native="native"):
    """GDB's frames with `set unwind claim all` under `frames` (and the claimed count under
    `count`), then GDB's own frames under `native`: the pair a test compares."""
    steps = [claim_all(), (frames, "frames", None)]
    if count is not None:
        steps.append(claimed(count))
    return steps + native_frames(native)
