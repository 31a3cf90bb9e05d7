"""The `unwind ...` subcommands for LLDB (classes for `command script add -c`).

Each command parses LLDB-style options, gathers registers and LLDB's own
frames, lets plugin.commands.reports compute and render the result (the same JSON and
text as GDB's commands), and prints one of the two. Every failure becomes
one LLDB error line via result.SetError: a user never sees a traceback.
"""

import json
import textwrap

import lldb

from plugin.commands import reports
from plugin.engine import STRATEGIES
from plugin.strategies.cfi import CfiTables

from . import native
from .options import UsageError, option_help, parse, usage
from .resolve import resolve
from .state import SETTINGS, state_for
from .target import live_process

SOURCES_HELP = "Sources: " + ", ".join(STRATEGIES) + "."


class _Command:
    """Shared plumbing: help texts, option parsing, error handling, output."""

    name = ""
    options = ()
    positional = ""
    short = ""
    details = ""

    def __init__(self, debugger, internal_dict):
        self.state = state_for(debugger)

    def get_short_help(self):
        return self.short

    def get_long_help(self):
        # LLDB prints the short help and a bare "Syntax: NAME" above this.
        return "Usage: %s\n\nOptions:\n%s\n\n%s\n" % (
            usage(self.name, self.options, self.positional),
            option_help(self.options), self.details.strip())

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            args = parse(command, self.options, self.state.sources)
            data, text = self.run(args, exe_ctx)
            result.AppendMessage(json.dumps(data, indent=1) if args.json else text)
            result.SetStatus(lldb.eReturnStatusSuccessFinishResult)
        except ValueError as exc:       # UsageError and the core's own "bad input" errors
            result.SetError("unwind %s: %s" % (self.name, exc))
        except Exception as exc:        # a bug: still one line, never a traceback
            result.SetError("unwind %s: internal error: %s: %s" % (self.name, type(exc).__name__, exc))

    def run(self, args, exe_ctx):
        raise NotImplementedError

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

    def _walk(self, exe_ctx, sources, limit=None, from_selected=False):
        """The plugin's walk, from the selected frame or from the innermost one."""
        sbtarget, thread, selected = self._stopped(exe_ctx)
        target, modules = self.state.live(sbtarget)
        start = selected if from_selected else thread.GetFrameAtIndex(0)
        frame, level, newer = native.physical_frame(thread, start)
        registers = native.registers(frame.first, target.arch)
        # The innermost pc is the instruction itself; so is the pc of a frame
        # interrupted by a signal (the frame below it is the trampoline).
        exact = newer is None or _is_signal_trampoline(target, modules, newer.first.GetPC())
        bt = reports.backtrace(target, modules, registers, exact, sources, self.state.max_frames,
                               first_level=level, limit=limit)
        return target, modules, thread, selected, bt


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


class BacktraceCommand(_Command):
    name = "backtrace"
    options = ("json", "sources", "count")
    short = "Print the plugin's own backtrace from the selected frame."
    details = """One line per frame: level, pc, function, module, and which source found it
(e.g. "found by: .eh_frame CFI"), then the reason the walk stopped. Levels count
physical frames (LLDB's inlined frames are not separate frames here).
--count N stops after N frames; --sources picks and orders the sources for
this walk. """ + SOURCES_HELP

    def run(self, args, exe_ctx):
        if args.words:
            raise UsageError("unexpected argument %r (use --count N to limit frames)" % " ".join(args.words))
        target, _, _, _, bt = self._walk(exe_ctx, args.sources, args.count, from_selected=True)
        return reports.backtrace_report(bt, target.arch)


class ExplainCommand(_Command):
    name = "explain"
    options = ("json", "sources")
    positional = "[LEVEL|all]"
    short = "Explain how the plugin recovered one frame, or all of them."
    details = """Shows the module and section, the table entry (FDE and CIE offsets and the
range they cover), the row in readable form (CFA=rsp+16 => rip=[CFA-8]),
every value read and the address it came from, the sources tried first and
why they were rejected, and whether LLDB's own unwinder agrees.
LEVEL counts physical frames from the innermost one (default: the selected
frame's)."""

    def run(self, args, exe_ctx):
        if len(args.words) > 1:
            raise UsageError("expected one LEVEL or \"all\", got %r" % " ".join(args.words))
        which = args.words[0] if args.words else None
        if which is not None and which != "all":
            try:
                which = int(which, 0)
            except ValueError:
                which = -1
            if which < 0:
                raise UsageError("LEVEL must be a frame number or \"all\", not %r" % args.words[0])
        target, modules, thread, selected, bt = self._walk(exe_ctx, args.sources)
        if which is None:
            which = native.physical_frame(thread, selected)[1]
        native_frames = native.physical_frames(thread, len(bt.frames) + 1)
        reports.attach_native(bt, native_frames, self.state.context(target, modules, args.sources))
        return reports.explain_report(bt, target.arch, which)


class CompareCommand(_Command):
    name = "compare"
    options = ("json", "sources")
    short = "Compare the plugin's frames with LLDB's own, frame by frame."
    details = """LLDB's frames are the thread's physical frames (inlined frames collapsed into
the frame they were inlined into). Each disagreement is marked, with which side
looks right where the code can tell (a return address must be executable and
follow a call instruction)."""

    def run(self, args, exe_ctx):
        if args.words:
            raise UsageError("unexpected argument %r" % " ".join(args.words))
        target, modules, thread, _, bt = self._walk(exe_ctx, args.sources)
        theirs = native.physical_frames(thread, len(bt.frames) + 16)
        return reports.compare_report(bt, theirs, self.state.context(target, modules, args.sources))


class ModulesCommand(_Command):
    name = "modules"
    options = ("json",)
    short = "List each module, its base address, and which unwind tables were found where."
    details = """Works with or without a process: without one, each module is shown at its
file addresses."""

    def run(self, args, exe_ctx):
        if args.words:
            raise UsageError("unexpected argument %r" % " ".join(args.words))
        sbtarget = _need_target(exe_ctx)
        if live_process(sbtarget) is not None:
            return reports.modules_report(self.state.live(sbtarget)[1])
        linked, unsupported = _static_modules(sbtarget)
        data, text = _merge([reports.modules_report(self.state.static(sbtarget, m)[1]) for m in linked],
                            {"modules": [], "unreadable": []})
        for name, reason in unsupported:
            data["unreadable"].append({"name": name, "base": None, "reason": reason})
            text += "\n%s: cannot read: %s" % (name, reason)
        return data, text.strip("\n")


class TablesCommand(_Command):
    name = "tables"
    options = ("json", "all")
    positional = "ADDRESS|FUNCTION"
    short = "Show every unwind table entry that covers an address or function."
    details = """Like LLDB's "image show-unwind": every source's entry and the row in force.
ADDRESS|FUNCTION is a number, $register, function name (optionally +OFFSET)
or an expression. With --all, every entry of every module instead.
Works without a process (e.g. "lldb-16 libfoo.so"): addresses are then the
module's file addresses, as "python -m plugin tables FILE" prints them."""

    def run(self, args, exe_ctx):
        sbtarget = _need_target(exe_ctx)
        live = live_process(sbtarget) is not None
        if args.all:
            if args.words:
                raise UsageError("give either --all or an ADDRESS|FUNCTION, not both")
            if live:
                target, modules = self.state.live(sbtarget)
                return reports.tables_report(target, modules, None)
            linked, unsupported = _static_modules(sbtarget)
            data, text = _merge([reports.tables_report(*self.state.static(sbtarget, m), None) for m in linked],
                                {"sources": [], "problems": []})
            for name, reason in unsupported:
                data["problems"].append("%s: %s" % (name, reason))
                text += "\nproblem: %s: %s" % (name, reason)
            return data, text.strip("\n")
        if not args.words:
            raise UsageError("give an ADDRESS or FUNCTION, e.g. \"unwind tables main\" (or --all)")
        frame = exe_ctx.GetFrame() if live else None
        address, sbmodule = resolve(" ".join(args.words), sbtarget, frame, live)
        if live:
            target, modules = self.state.live(sbtarget)
        elif sbmodule is None:
            raise UsageError("the target has no modules")
        elif _unsupported(sbmodule):
            raise UsageError("%s: %s" % (sbmodule.GetFileSpec().GetFilename(), _unsupported(sbmodule)))
        else:
            target, modules = self.state.static(sbtarget, sbmodule)
        return reports.tables_report(target, modules, address)


class SettingsCommand(_Command):
    name = "settings"
    options = ("json",)
    positional = "[NAME [VALUE]]"
    short = "Show or change the plugin's settings: sources, max-frames, scan-words."
    details = """With no NAME, shows every setting; with a NAME, that one; with a NAME and a
VALUE, changes it (and shows it). Settings last for the debugger session,
across targets and re-runs (put them in ~/.lldbinit after the import to keep
them). --json prints all settings as {"sources": [...], "max_frames": N,
"scan_words": N}.

Settings:
""" + "\n".join(textwrap.fill(meaning, 79, initial_indent="  %-17s" % ("%s %s" % (name, syntax)),
                              subsequent_indent=" " * 19)
                for name, (_, syntax, meaning) in SETTINGS.items()) + """

Examples:
  unwind settings sources cfi,frame-pointer   tables, then frame records
  unwind settings sources scan                stack scanning only
  unwind settings max-frames 200000
The --sources option of a command overrides the sources for one walk.
LLDB 16's Python API cannot add entries to LLDB's own `settings set`,
hence this command."""

    def run(self, args, exe_ctx):
        words = args.words
        if words:
            name = words[0]
            self.state.setting(name)         # an unknown NAME is an error even without a VALUE
            if len(words) > 1:
                # "cfi, scan" arrives as two words: a source list may be spaced.
                if name != "sources" and len(words) > 2:
                    raise UsageError("%s takes one value, got %r" % (name, " ".join(words[1:])))
                self.state.change(name, " ".join(words[1:]))
            shown = [name]
        else:
            shown = list(SETTINGS)
        return self.state.settings_json(), "\n".join(self._line(name) for name in shown)

    def _line(self, name):
        """`NAME (TYPE) = VALUE`, as LLDB's own `settings show` prints a setting."""
        kind = SETTINGS[name][0]
        line = "%s (%s) = %s" % (name, kind, self.state.setting(name))
        if name == "sources":
            off = [s for s in STRATEGIES if s not in self.state.sources]
            line += "   (off: %s)" % (", ".join(off) or "none")
        return line


def _need_target(exe_ctx):
    sbtarget = exe_ctx.GetTarget()
    if not sbtarget.IsValid():
        raise UsageError("no target; create one with \"target create PROGRAM\"")
    return sbtarget


def _static_modules(sbtarget):
    """(modules that can be shown without a process, [(name, why not)] for the others)."""
    linked, unsupported = [], []
    for sbmodule in sbtarget.module_iter():
        reason = _unsupported(sbmodule)
        if reason:
            unsupported.append((sbmodule.GetFileSpec().GetFilename(), reason))
        else:
            linked.append(sbmodule)
    return linked, unsupported


def _unsupported(sbmodule):
    # LLDB gives no header address to a file without program headers (a .o):
    # there is no load layout to read its tables through.
    if not sbmodule.GetObjectFileHeaderAddress().IsValid():
        return "no header address in LLDB (an object file?): only linked executables and libraries are supported"
    return None


def _merge(parts, empty):
    """One report from per-module reports (static targets): lists joined, texts joined.

    A key that is not a list (none today) keeps the first module's value;
    `empty` is the report when there are no modules at all.
    """
    if len(parts) == 1:
        return parts[0]
    data = dict(empty) if not parts else {}
    for part, _ in parts:
        for key, value in part.items():
            if isinstance(value, list):
                data.setdefault(key, []).extend(value)
            else:
                data.setdefault(key, value)
    text = "\n".join(part[1] for part in parts if part[1])
    return data, text
