"""GDB side of the unwind plugin: Target over gdb, the frame unwinder, the commands."""
from __future__ import annotations


def install():
    """Register the unwinder, the commands and the event hooks (once per GDB session)."""
    import gdb
    import gdb.unwinder

    from .commands import register
    from .kernel_frames import KernelEnd, KernelFrames
    from .stack_end import ProgramEnd
    from .state import GdbState
    from .unwinder import PluginUnwinder

    from plugin import api
    from plugin.commands.spec import Debugger

    if getattr(gdb, "_unwind_plugin_state", None) is not None:
        return gdb._unwind_plugin_state
    state = GdbState()
    unwinder = PluginUnwinder(state)       # GDB's list holds it; the state only a weak reference
    state.unwinder = unwinder
    state.kernel_frames = unwinder.then = KernelFrames(state, unwinder)      # asked after the plugin's unwinder declines
    state.kernel_end = KernelEnd(state.kernel_frames)       # ends `bt` at the kernel stack's proved end
    gdb.frame_filters[state.kernel_end.name] = state.kernel_end
    state.program_end = ProgramEnd(state)       # ends `bt` at a program's entry frame where GDB walks past it
    gdb.frame_filters[state.program_end.name] = state.program_end
    gdb.unwinder.register_unwinder(None, unwinder, replace=True)
    state.connect_events()
    register(state)
    gdb._unwind_plugin_state = state
    api.register_runner(Debugger.GDB, lambda spec, options, words: run_for_api(state, spec, options, words))
    return state


def run_for_api(state, spec, options, words) -> dict:
    """plugin.api's runner in GDB: the object `spec`'s -json prints; the debugger's errors as ValueError."""
    import gdb

    from plugin.commands.options import parse_gdb

    from .commands import RUN
    try:
        given = parse_gdb(spec, options + ["--"] + words, state.sources)
        return RUN[spec.name](state, given)[0]
    except (gdb.error, gdb.GdbError) as exc:    # gdb.GdbError is no gdb.error: both are caught
        raise ValueError(str(exc)) from None
