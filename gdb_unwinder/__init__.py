"""GDB side of the unwind plugin: Target over gdb, the frame unwinder, the commands."""


def install():
    """Register the unwinder, the commands and the event hooks (once per GDB session)."""
    import gdb
    import gdb.unwinder

    from .claim import ClaimParameter
    from .commands import register
    from .state import GdbState
    from .unwinder import PluginUnwinder

    if getattr(gdb, "_unwind_plugin_state", None) is not None:
        return gdb._unwind_plugin_state
    state = GdbState()
    state.unwinder = PluginUnwinder(state)
    gdb.unwinder.register_unwinder(None, state.unwinder, replace=True)
    state.connect_events()
    register(state)
    ClaimParameter(state)
    gdb._unwind_plugin_state = state
    return state
