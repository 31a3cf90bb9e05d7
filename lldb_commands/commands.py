"""The `unwind ...` subcommands for LLDB (classes for `command script add -c`).

Each class takes its options, positional words, checks and help from its
declaration (plugin/commands/catalog.py), read in LLDB's option style by
plugin/commands/options.py; it gathers registers and LLDB's own frames, lets plugin.commands.reports compute and render the result (the same JSON and
text as GDB's commands), and prints one of the two. Every failure becomes
one LLDB error line via result.SetError: a user never sees a traceback.
"""

import contextlib
import gc
import json

import lldb

from plugin.commands import catalog, reports
from plugin.commands.spec import CommandSpec, Debugger, EveryThread
from plugin.engine import DEFAULT_SOURCES
from plugin.render import explain
from plugin.settings import SettingType, find_setting
from plugin.strategies.cfi import CfiTables

from . import native, provider
from .options import UsageError, parse_lldb
from .resolve import resolve
from .state import SETTINGS, state_for
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
            data, text = self.run(given, exe_ctx)
            result.AppendMessage(dump_json(data) if given.json else text)
            result.SetStatus(lldb.eReturnStatusSuccessFinishResult)
        except ValueError as exc:       # UsageError and the core's own "bad input" errors
            result.SetError("unwind %s: %s" % (self.name, exc))
        except Exception as exc:        # a bug: still one line, never a traceback
            result.SetError("unwind %s: internal error: %s: %s" % (self.name, type(exc).__name__, exc))

    def run(self, given, exe_ctx):
        """(json object, text) for a parsed command line."""
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
        """(LldbTarget, ModuleMap, the plugin's walk of `thread` from SBFrame `selected` or frame #0)."""
        target, modules = self.state.live(sbtarget)
        start = selected or thread.GetFrameAtIndex(0)
        frame, level, newer = native.physical_frame(thread, start)
        skip = 0
        if level in self._supplied(thread):
            skip, (frame, level, newer) = level, native.physical_frame(thread, thread.GetFrameAtIndex(0))
        registers = native.registers(frame.first, target.arch)
        # The innermost pc is the instruction itself; so is the pc of a frame
        # interrupted by a signal (the frame below it is the trampoline).
        exact = newer is None or _is_signal_trampoline(target, modules, newer.first.GetPC())
        step = target.plans.stepper(target.generation) if fast else None
        bt = reports.backtrace(target, modules, registers, exact, sources, self.state.max_frames,
                               first_level=level, limit=None if skip else limit, step=step)
        if skip:
            bt.frames = [f for f in bt.frames if f.level >= skip]
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


def dump_json(data):
    """`--json` output: one key per line, and one line per item of a list of objects (a frame).

    json.dumps(indent=...) runs Python's pure-Python encoder, 40% of a
    10,000-frame `unwind backtrace --json`; this encodes each line with the
    C encoder instead. The text is the same JSON as json.dumps(data) gives.
    """
    if not isinstance(data, dict):
        return json.dumps(data)
    lines = []
    for key, value in data.items():
        head = " %s: " % json.dumps(key)
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
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


class BacktraceCommand(_Command):
    spec = catalog.BACKTRACE

    def run(self, given, exe_ctx):
        with _no_gc_pauses():       # the walk's records are freed (by _backtrace's return) before it resumes
            return self._backtrace(given, exe_ctx)

    def _backtrace(self, given, exe_ctx):
        every = isinstance(given.value, EveryThread)
        count = given.value.count if every else given.value
        limit = given.count if given.count is not None else count     # -c N, or N / -N as in GDB
        target, _, selected, _, bt = self._walk(exe_ctx, given.sources, limit, from_selected=True, fast=True)
        data, text = _render(bt, target.arch, given.json)
        if every:
            threads, text = self._every_thread(selected, given.sources, limit, given.json)
            if given.json:
                data["threads"] = threads
        return data, text

    def _every_thread(self, selected, sources, limit, as_json):
        """Each thread's backtrace from its innermost frame, as LLDB's `bt all` lists them."""
        reports_json, texts = [], []
        process = selected.GetProcess()
        for thread in process:
            target, _, bt = self._walk_thread(process.GetTarget(), thread, None, sources, limit, fast=True)
            data, text = _render(bt, target.arch, as_json)
            if not as_json:
                texts.append(_thread_head(thread, selected) + text)
                continue
            data.update(thread=thread.GetIndexID(), tid=thread.GetThreadID(), name=thread.GetName())
            reports_json.append(data)
        return reports_json, "\n\n".join(texts)


def _thread_head(thread, selected):
    """`* thread #1, tid = 42, name = 'demo'` and a newline, as LLDB's `bt all` heads a thread."""
    mark = "*" if thread.GetThreadID() == selected.GetThreadID() else " "
    name = ", name = '%s'" % thread.GetName() if thread.GetName() else ""
    return "%s thread #%d, tid = %d%s\n" % (mark, thread.GetIndexID(), thread.GetThreadID(), name)


def _render(bt, arch, as_json):
    """(json object, None) or (None, text): only the form the command prints (each costs per frame)."""
    if as_json:
        return explain.backtrace_json(bt, arch), None
    return None, explain.backtrace_text(bt, arch)


@contextlib.contextmanager
def _no_gc_pauses():
    """Python's cyclic collector held off during a walk (it rescanned the walk's growing records:
    a quarter of a 10,000-frame `unwind backtrace`), restored after: its next run frees any cycle."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class ExplainCommand(_Command):
    spec = catalog.EXPLAIN

    def run(self, given, exe_ctx):
        target, modules, thread, selected, bt = self._walk(exe_ctx, given.sources)
        which = given.value if given.value is not None else native.physical_frame(thread, selected)[1]
        native_frames = self._native(thread, len(bt.frames) + 1)
        reports.attach_native(bt, native_frames, self.state.context(target, modules, given.sources))
        width = self.debugger.GetTerminalWidth()
        data, text = reports.explain_report(bt, target.arch, which, given.verbose, width or None)
        supplied = sorted(level for level in self._supplied(thread) if which == "all" or level == which)
        if supplied:
            data["supplied"] = supplied
            text += "\n\nSupplied to LLDB by \"unwind provider\" (LLDB's own unwinder did not find %s): %s." % (
                "them" if len(supplied) > 1 else "it", ", ".join("#%d" % level for level in supplied))
        return data, text


class CompareCommand(_Command):
    spec = catalog.COMPARE

    def run(self, given, exe_ctx):
        target, modules, thread, _, bt = self._walk(exe_ctx, given.sources)
        theirs = self._native(thread, len(bt.frames) + 16)
        return reports.compare_report(bt, theirs, self.state.context(target, modules, given.sources))


class ModulesCommand(_Command):
    spec = catalog.MODULES

    def run(self, given, exe_ctx):
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
    spec = catalog.TABLES

    def run(self, given, exe_ctx):
        sbtarget = _need_target(exe_ctx)
        live = live_process(sbtarget) is not None
        if given.all:
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
        frame = exe_ctx.GetFrame() if live else None
        address, sbmodule = resolve(given.value, sbtarget, frame, live)
        if live:
            target, modules = self.state.live(sbtarget)
        elif sbmodule is None:
            raise UsageError("the target has no modules")
        elif _unsupported(sbmodule):
            raise UsageError("%s: %s" % (sbmodule.GetFileSpec().GetFilename(), _unsupported(sbmodule)))
        else:
            target, modules = self.state.static(sbtarget, sbmodule)
        return reports.tables_report(target, modules, address)


# LLDB's own `settings show` names a setting's type so; GDB has `set/show unwind` instead.
LLDB_TYPE = {SettingType.SOURCES: "list", SettingType.UNSIGNED: "unsigned", SettingType.BOOLEAN: "boolean"}


class SettingsCommand(_Command):
    spec = catalog.SETTINGS

    def run(self, given, exe_ctx):
        words = given.value
        if words:
            setting = find_setting(words[0], SETTINGS)     # an unknown NAME is an error even without a VALUE
            if len(words) > 1:
                # "cfi, scan" arrives as two words: a source list may be spaced.
                if setting.type != SettingType.SOURCES and len(words) > 2:
                    raise UsageError("%s takes one value, got %r" % (setting.name, " ".join(words[1:])))
                self.state.change(setting.name, " ".join(words[1:]))
            shown = [setting]
        else:
            shown = list(SETTINGS)
        return self.state.settings_json(), "\n".join(self._line(setting) for setting in shown)

    def _line(self, setting):
        """`NAME (TYPE) = VALUE`, as LLDB's own `settings show` prints a setting."""
        line = "%s (%s) = %s" % (setting.name, LLDB_TYPE[setting.type], self.state.setting(setting.name))
        if setting.type == SettingType.SOURCES:
            off = [s for s in DEFAULT_SOURCES if s not in self.state.sources]
            line += "   (off: %s)" % (", ".join(off) or "none")
        return line


class ProviderCommand(_Command):
    spec = catalog.PROVIDER

    def run(self, given, exe_ctx):
        version = lldb_version()
        if given.value is not None and not provider.available():
            raise UsageError("needs %s or later (the frame provider API); this is LLDB %s"
                             % (provider.NEEDED, version))
        sbtarget = _need_target(exe_ctx)
        if given.value is not None:
            provider.switch(self.state, sbtarget, given.value)
        on = provider.available() and sbtarget.GetGloballyUniqueID() in self.state.providers
        return {"provider": "on" if on else "off", "lldb_version": version}, \
            "provider: %s%s" % ("on" if on else "off",
                                "" if provider.available() else " (needs %s or later)" % provider.NEEDED)


def lldb_version():
    """LLDB's version as "22.1.8" (from "lldb version 22.1.8"), or its whole version line."""
    words = lldb.SBDebugger.GetVersionString().split()
    return words[2] if len(words) > 2 and words[:2] == ["lldb", "version"] else " ".join(words)


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


from .validate import ValidateCommand  # noqa: E402,F401  (`unwind validate`, registered by loader.py)
