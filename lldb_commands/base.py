"""What every `unwind` subcommand in LLDB shares: help and option parsing from its
declaration, errors as one line, output (JSON through the C encoder), and the
walk of a thread from its selected or innermost frame."""
from __future__ import annotations

import json

import lldb

from plugin.commands import reports
from plugin.commands.spec import CommandSpec, Debugger
from plugin.engine import DEFAULT_SOURCES
from plugin.strategies.cfi import CfiTables

from . import native, provider
from .levels import LldbLevels
from .options import UsageError, parse_lldb
from .state import state_for
from .target import live_process

LLDB = Debugger.LLDB


class _Command:
    """Shared plumbing: help texts and option parsing (from the declaration), errors, output."""

    spec: CommandSpec = None

    def __init__(self, debugger, internal_dict):
        self.state = state_for(debugger)
        self.debugger = debugger        # for the terminal's width

    @property
    def name(self):
        return self.spec.name

    def get_short_help(self):
        return self.spec.title(LLDB, DEFAULT_SOURCES)

    def get_long_help(self):
        # LLDB prints the short help and a bare "Syntax: NAME" above this.
        return self.spec.help(LLDB, DEFAULT_SOURCES)

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            given = parse_lldb(self.spec, command, self.state.sources)
            result.AppendMessage(self.printed(given, exe_ctx))
            result.SetStatus(lldb.eReturnStatusSuccessFinishResult)
        except ValueError as exc:       # UsageError and the core's own "bad input" errors
            result.SetError("unwind %s: %s" % (self.name, exc))
        except Exception as exc:        # a bug: still one line, never a traceback
            result.SetError("unwind %s: internal error: %s: %s" % (self.name, type(exc).__name__, exc))

    def run(self, given, exe_ctx):
        """(json object, text) for a parsed command line."""
        raise NotImplementedError

    def printed(self, given, exe_ctx) -> str:
        """What the command prints: its JSON (--json) or its text."""
        data, text = self.run(given, exe_ctx)
        return dump_json(data) if given.json else text

    # -- helpers shared by the commands that walk a stack --------------------------
    def _stopped(self, exe_ctx):
        """(sbtarget, thread, selected frame) of a stopped process, or UsageError."""
        sbtarget = exe_ctx.GetTarget()
        if not sbtarget.IsValid():
            raise UsageError("no target; create one with \"target create PROGRAM\"")
        if live_process(sbtarget) is None:
            raise UsageError("the program is not running or not stopped")
        thread = exe_ctx.GetThread()
        if not thread.IsValid():
            thread = sbtarget.GetProcess().GetSelectedThread()
        frame = exe_ctx.GetFrame()
        if not frame.IsValid():
            frame = thread.GetSelectedFrame() if thread.IsValid() else frame
        if not thread.IsValid() or not frame.IsValid():
            raise UsageError("no frame selected (is the program stopped?)")
        return sbtarget, thread, frame

    def _walk(self, exe_ctx, sources, limit=None, from_selected=False, fast=False):
        """The plugin's walk, from the selected frame or from the innermost one.

        A frame `unwind provider` supplied to LLDB has no registers in LLDB:
        from such a frame the walk starts at the innermost frame and shows
        the frames from the selected level on.
        """
        sbtarget, thread, selected = self._stopped(exe_ctx)
        target, modules, bt = self._walk_thread(sbtarget, thread, selected if from_selected else None,
                                                sources, limit, fast)
        return target, modules, thread, selected, bt

    def _walk_thread(self, sbtarget, thread, selected, sources, limit=None, fast=False):
        """(LldbTarget, ModuleMap, the plugin's walk of `thread` from SBFrame `selected` or frame #0),
        at LLDB's frame numbers (levels.py)."""
        target, modules = self.state.live(sbtarget)
        start = selected or thread.GetFrameAtIndex(0)
        frame, level, newer = native.physical_frame(thread, start)
        skip = None
        if level in self._supplied(thread):
            skip = level        # the walk starts at frame #0: the provider's frames have no registers
            frame, level, newer = native.physical_frame(thread, thread.GetFrameAtIndex(0))
            start = thread.GetFrameAtIndex(0)
        registers = native.registers(frame.first, target.arch)
        # The innermost pc is the instruction itself; so is the pc of a frame
        # interrupted by a signal (the frame below it is the trampoline).
        exact = newer is None or _is_signal_trampoline(target, modules, newer.first.GetPC())
        step = target.plans.stepper(target.generation) if fast else None
        placed = LldbLevels(thread, frame, start.GetFrameID())
        bt = reports.backtrace(target, modules, registers, exact, sources, self.state.max_frames,
                               first_level=start.GetFrameID(), limit=None if skip is not None else limit,
                               step=step, place=placed.place)
        if skip is not None:
            bt.frames = bt.frames[skip:]        # physical levels from the selected frame's on
            bt = reports.limited(bt, limit)
        return target, modules, bt

    def _supplied(self, thread):
        """{physical level: pc} of the frames `unwind provider` supplied to LLDB at this stop."""
        if not self.state.providers:
            return {}
        return self.state.supplied.get(provider.supplied_key(thread), {})

    def _native(self, thread, limit):
        """LLDB's own physical frames: those before the first frame the provider supplied."""
        frames = native.physical_frames(thread, limit)
        supplied = self._supplied(thread)
        return frames[:min(supplied)] if supplied else frames


class Encoded(list):
    """Items of a JSON list already encoded, one string each (see json_lines.py)."""


def dump_json(data):
    """`--json` output: one key per line, and one line per item of a list of objects (a frame).

    json.dumps(indent=...) runs Python's pure-Python encoder, 40% of a
    10,000-frame `unwind backtrace --json`; this encodes each line with the
    C encoder instead. The text is the same JSON as json.dumps(data) gives.
    A value given as Encoded is written as it is, one item a line.
    """
    if not isinstance(data, dict):
        return json.dumps(data)
    lines = []
    for key, value in data.items():
        head = " %s: " % json.dumps(key)
        if isinstance(value, Encoded):
            lines.append("%s[\n  %s\n ]" % (head, ",\n  ".join(value)) if value else head + "[]")
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            items = ",\n".join("  " + json.dumps(item) for item in value)
            lines.append("%s[\n%s\n ]" % (head, items))
        else:
            lines.append(head + json.dumps(value))
    return "{\n%s\n}" % ",\n".join(lines) if lines else "{}"


def _is_signal_trampoline(target, modules, pc):
    """Does the CFI covering pc mark its frame as a signal frame (CIE augmentation 'S')?

    LLDB 16's SB API does not say which frame is a trap handler, but the
    tables do: that is how the core itself recognises __restore_rt.
    """
    module = modules.find(pc)
    if module is None:
        return False
    try:
        hit = CfiTables.of(module, target).lookup(pc)
    except Exception:        # undecodable tables: treat as an ordinary frame
        return False
    return hit is not None and hit.signal_frame
