"""GDB side of the unwind plugin: Target over gdb, the frame unwinder, the commands."""


def install():
    """Register the unwinder, the commands and the event hooks (once per GDB session)."""
    import gdb
    import gdb.unwinder

    from .commands import register
    from .kernel_frames import KernelFrames
    from .state import GdbState
    from .unwinder import PluginUnwinder

    if getattr(gdb, "_unwind_plugin_state", None) is not None:
        return gdb._unwind_plugin_state
    state = GdbState()
    state.unwinder = PluginUnwinder(state)
    # registered first, so GDB asks it after the plugin's unwinder (each goes to the list's front)
    state.kernel_frames = KernelFrames(state)
    gdb.unwinder.register_unwinder(None, state.kernel_frames, replace=True)
    gdb.unwinder.register_unwinder(None, state.unwinder, replace=True)
    state.connect_events()
    register(state)
    gdb._unwind_plugin_state = state
    return state
