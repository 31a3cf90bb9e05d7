"""`unwind validate` in LLDB: reach the function's entry, then step over calls until it returns.

The comparison is plugin.validate.live's; here is only what is LLDB's own:
resolving FUNCTION|ADDRESS, a one-shot breakpoint and Continue to reach it,
SBThread.StepInstruction (over calls only) in synchronous mode, the registers
at each stop, and telling an ordinary step's stop from a breakpoint's, a
signal's or an exit.
"""

import lldb

from plugin.commands import catalog
from plugin.commands.spec import VALIDATE_STEPS
from plugin.engine import STRATEGIES, UnwindContext
from plugin.settings import is_fallback
from plugin.validate import live, stepping

from . import native
from .base import _Command
from .options import UsageError
from .resolve import resolve

ENDED = (lldb.eStateExited, lldb.eStateDetached, lldb.eStateCrashed, lldb.eStateInvalid)
OTHER_STOPS = {lldb.eStopReasonBreakpoint: "a breakpoint was hit", lldb.eStopReasonSignal: "a signal arrived",
               lldb.eStopReasonException: "an exception stopped the program",
               lldb.eStopReasonWatchpoint: "a watchpoint was hit"}


class LldbStepper(stepping.Stepper):
    def __init__(self, process, thread, target):
        self.process, self.thread, self.target, self.arch = process, thread, target, target.arch

    def registers(self):
        return native.registers(self.thread.GetFrameAtIndex(0), self.arch)

    def step(self, over):
        error = lldb.SBError()
        self.thread.StepInstruction(over, error)
        self.target.resumed()
        if self.process.GetState() in ENDED:
            return live.Ending.EXITED, "exit status %d" % self.process.GetExitStatus()
        if not error.Success():
            return live.Ending.FAILED, error.GetCString() or "the step failed"
        reason = self.thread.GetStopReason()
        if reason in OTHER_STOPS:
            return live.Ending.INTERRUPTED, OTHER_STOPS[reason]
        return None

    def where(self):
        frame = self.thread.GetFrameAtIndex(0)
        return "0x%x in %s" % (frame.GetPC(), frame.GetFunctionName() or "??")


class _Sync:
    """The debugger in synchronous mode meanwhile, so that each step returns once stopped."""

    def __init__(self, debugger):
        self.debugger = debugger

    def __enter__(self):
        self.was = self.debugger.GetAsync()
        self.debugger.SetAsync(False)

    def __exit__(self, *exc):
        self.debugger.SetAsync(self.was)


def _run_to(sbtarget, process, address):
    """Continue to a one-shot breakpoint at address; the thread that stopped there, or UsageError."""
    breakpoint = sbtarget.BreakpointCreateByAddress(address)
    breakpoint.SetOneShot(True)
    try:
        process.Continue()
    finally:
        if breakpoint.IsValid():
            sbtarget.BreakpointDelete(breakpoint.GetID())
    if process.GetState() in ENDED:
        raise UsageError("the program exited before reaching 0x%x" % address)
    thread = process.GetSelectedThread()
    pc = thread.GetFrameAtIndex(0).GetPC()
    if pc != address:
        raise UsageError("the program stopped at 0x%x before reaching 0x%x" % (pc, address))
    return thread


class ValidateCommand(_Command):
    spec = catalog.VALIDATE

    def run(self, given, exe_ctx):
        sbtarget, thread, frame = self._stopped(exe_ctx)
        target, modules = self.state.live(sbtarget)
        arch = target.arch
        process = sbtarget.GetProcess()
        explicit = tuple(given.sources) != tuple(self.state.sources)
        sources = stepping.table_sources(given.sources, explicit, is_fallback)
        with _Sync(self.debugger):
            pc = thread.GetFrameAtIndex(0).GetPC()
            ran_to_entry = False
            if given.value is not None:
                address, _ = resolve(given.value, sbtarget, frame, True)
                if address != pc:
                    thread = _run_to(sbtarget, process, address)
                    target.resumed()
                    ran_to_entry = True
            elif not stepping.is_function_entry(target, modules, pc):
                raise UsageError("0x%x is not a function's first instruction; stop at one "
                                 "(breakpoint set -a FUNCTION) or name it: unwind validate FUNCTION" % pc)
            stepper = LldbStepper(process, thread, target)
            registers = stepper.registers()
            truth = live.truth_at_entry(arch, registers, target.read_memory)
            found = target.symbol(truth.entry)
            name = given.value or (found[0] if found and found[1] == truth.entry else "0x%x" % truth.entry)
            check = live.LiveValidation(lambda s: UnwindContext(target, modules, (s,)), arch, sources,
                                        STRATEGIES, truth, target.symbol,
                                        stepping.decoder(arch, target.read_memory, registers))
            check.function_end = stepping.function_end(target, modules, truth.entry)
            ending, steps, detail = stepping.run(check, stepper, given.steps or VALIDATE_STEPS)
            stopped_at = stepper.where() if process.GetState() not in ENDED else ""
        return check.report(name, ending, steps, detail, ran_to_entry, stopped_at)
