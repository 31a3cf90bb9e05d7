"""`unwind validate` in GDB: reach the function's entry, then `nexti` until it returns.

The comparison is plugin.validate.live's; here is only what is GDB's own:
evaluating FUNCTION|ADDRESS, a temporary breakpoint and `continue` to reach
it, `stepi` (`nexti` at a call), the registers at each stop, and
telling an ordinary step's stop from a breakpoint's, a signal's or an exit.
"""

import gdb

from plugin.commands.spec import VALIDATE_STEPS
from plugin.engine import STRATEGIES, UnwindContext
from plugin.settings import is_fallback
from plugin.validate import live, stepping

from . import native
from .compat import invalidate_cached_frames


class _Stops:
    """The kind of GDB's last stop while validate steps (connected only meanwhile)."""

    def __init__(self):
        self.last = None
        self.exited = None

    def on_stop(self, event):
        self.last = event

    def on_exit(self, event):
        self.exited = getattr(event, "exit_code", None)

    def __enter__(self):
        gdb.events.stop.connect(self.on_stop)
        gdb.events.exited.connect(self.on_exit)
        return self

    def __exit__(self, *exc):
        gdb.events.stop.disconnect(self.on_stop)
        gdb.events.exited.disconnect(self.on_exit)


class GdbStepper(stepping.Stepper):
    def __init__(self, arch, stops):
        self.arch = arch
        self.stops = stops

    def registers(self):
        return native.innermost_registers(self.arch, gdb.newest_frame())[0]

    def step(self, over):
        self.stops.last = None
        try:
            gdb.execute("nexti" if over else "stepi", to_string=True)
        except gdb.error as exc:
            if self.stops.exited is not None or not _alive():
                return live.Ending.EXITED, ""
            return live.Ending.FAILED, str(exc)
        if self.stops.exited is not None or not _alive():
            return live.Ending.EXITED, "exit code %s" % self.stops.exited
        return _other_stop(self.stops.last)

    def where(self):
        frame = gdb.newest_frame()
        return "0x%x in %s" % (frame.pc(), frame.name() or "??")


class _Quiet:
    """No stop notification per step (`set suppress-cli-notifications`, GDB 12 and later) meanwhile."""

    def __enter__(self):
        try:
            self.was = gdb.parameter("suppress-cli-notifications")
            gdb.execute("set suppress-cli-notifications on", to_string=True)
        except (gdb.error, RuntimeError):
            self.was = None
        return self

    def __exit__(self, *exc):
        if self.was is not None:
            gdb.execute("set suppress-cli-notifications %s" % ("on" if self.was else "off"), to_string=True)


def _alive():
    inferior = gdb.selected_inferior()
    return inferior.pid != 0 and bool(inferior.threads())


def _other_stop(event):
    """None for the stop a step ends with; (INTERRUPTED, why) for a breakpoint's or a signal's."""
    if isinstance(event, gdb.BreakpointEvent):
        numbers = ", ".join(str(b.number) for b in event.breakpoints)
        return live.Ending.INTERRUPTED, "breakpoint %s was hit" % numbers
    if isinstance(event, gdb.SignalEvent):
        return live.Ending.INTERRUPTED, "the program received %s" % event.stop_signal
    return None


def _address_of(expression):
    try:
        value = gdb.parse_and_eval(expression)
        if value.type.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        return int(value)
    except (gdb.error, ValueError) as exc:
        raise gdb.GdbError("unwind validate: cannot evaluate %r: %s" % (expression, exc)) from None


def _run_to(address, stops):
    """Continue to a temporary breakpoint at address; GdbError when the program stops elsewhere."""
    breakpoint = gdb.Breakpoint("*0x%x" % address, internal=True, temporary=True)
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error as exc:
        raise gdb.GdbError("unwind validate: cannot run to 0x%x: %s" % (address, exc)) from None
    finally:
        if breakpoint.is_valid():
            breakpoint.delete()
    if stops.exited is not None or not _alive():
        raise gdb.GdbError("unwind validate: the program exited before reaching 0x%x" % address)
    pc = gdb.newest_frame().pc()
    if pc != address:
        raise gdb.GdbError("unwind validate: the program stopped at 0x%x before reaching 0x%x" % (pc, address))


def run_validate(state, given, explicit_sources):
    """(json object, text) of `unwind validate`; the caller checked there is a process."""
    arch = state.refresh_arch()
    inferior = state.inferior()
    target, modules = inferior.target, inferior.modules
    sources = stepping.table_sources(given.sources, explicit_sources, is_fallback)
    with _Stops() as stops, _Quiet():
        pc = gdb.newest_frame().pc()
        ran_to_entry = False
        if given.value is not None:
            address = _address_of(given.value)
            if address != pc:
                _run_to(address, stops)
                ran_to_entry = True
        elif not stepping.is_function_entry(target, modules, pc):
            raise gdb.GdbError("unwind validate: 0x%x is not a function's first instruction; stop at one "
                               "(break *FUNCTION) or name it: unwind validate FUNCTION" % pc)
        stepper = GdbStepper(arch, stops)
        registers = stepper.registers()
        try:
            truth = live.truth_at_entry(arch, registers, target.read_memory)
        except ValueError as exc:
            raise gdb.GdbError("unwind validate: %s" % exc) from None
        found = target.symbol(truth.entry)
        name = given.value or (found[0] if found and found[1] == truth.entry else "0x%x" % truth.entry)
        check = live.LiveValidation(lambda s: UnwindContext(target, modules, (s,)), arch, sources, STRATEGIES,
                                    truth, target.symbol, stepping.decoder(arch, target.read_memory, registers))
        check.function_end = stepping.function_end(target, modules, truth.entry)
        limit = given.steps or VALIDATE_STEPS
        ending, steps, detail = stepping.run(check, stepper, limit)
        stopped_at = stepper.where() if _alive() else ""
    invalidate_cached_frames()
    return check.report(name, ending, steps, detail, ran_to_entry, stopped_at)
