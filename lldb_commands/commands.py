"""The `unwind ...` subcommands for LLDB (classes for `command script add -c`).

Each class takes its options, positional words, checks and help from its
declaration (plugin/commands/catalog.py), read in LLDB's option style by
plugin/commands/options.py; it gathers registers and LLDB's own frames, lets plugin.commands.reports compute and render the result (the same JSON and
text as GDB's commands), and prints one of the two. Every failure becomes
one LLDB error line via result.SetError: a user never sees a traceback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc

import shlex

import lldb

from plugin import api
from plugin.commands import catalog, reports
from plugin.commands.options import parse_lldb
from plugin.commands.spec import Debugger, EveryThread
from plugin.engine import DEFAULT_SOURCES
from plugin.render import explain
from plugin.settings import SettingType, find_setting

from . import native, provider, text_lines
from .base import Encoded, _Command, dump_json
from .json_lines import FrameLines
from .options import UsageError
from .resolve import resolve
from .state import SETTINGS
from .target import live_process

class BacktraceCommand(_Command):
    spec = catalog.BACKTRACE

    def run(self, given, exe_ctx):
        with _no_gc_pauses():       # the walk's records are freed (by _backtrace's return) before it resumes
            return self._backtrace(given, exe_ctx, _render)

    def printed(self, given, exe_ctx):
        """The JSON is written from the walk's frames (json_lines.py), not from a dict per frame."""
        if not given.json:
            return super().printed(given, exe_ctx)
        with _no_gc_pauses():
            data, _ = self._backtrace(given, exe_ctx, _encoded)
        return dump_json(data)

    def _backtrace(self, given, exe_ctx, render):
        every = isinstance(given.value, EveryThread)
        count = given.value.count if every else given.value
        limit = given.count if given.count is not None else count     # -c N, or N / -N as in GDB
        target, _, selected, _, bt = self._walk(exe_ctx, given.sources, limit, from_selected=True, fast=True)
        data, text = render(bt, target.arch, given.json)
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
    return None, text_lines.backtrace_text(bt, arch)


def _encoded(bt, arch, as_json):
    """_render's answer, with the frames of the JSON form as their encoded lines (base.Encoded)."""
    if not as_json:
        return _render(bt, arch, as_json)
    data = explain.backtrace_json(dataclasses.replace(bt, frames=[]), arch)
    data["frames"] = Encoded(FrameLines(arch).lines(bt.frames))
    return data, None


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
        which = given.value if given.value is not None else selected.GetFrameID()
        native_frames = self._native(thread, len(bt.frames) + 1)
        reports.attach_native(bt, native_frames, self.state.context(target, modules, given.sources))
        width = self.debugger.GetTerminalWidth()
        data, text = reports.explain_report(bt, target.arch, which, given.verbose, width or None)
        # The walk starts at frame #0, so its frame k is LLDB's physical frame k, which the provider
        # supplied by its physical level.
        supplied = sorted(bt.frames[k].level for k in self._supplied(thread) if k < len(bt.frames)
                          and (which == "all" or which in bt.frames[k].levels))
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
                provider.refresh(self.state, exe_ctx.GetTarget())
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
            self.state.provider_wanted = given.value       # and for the targets that stop later
        on = provider.available() and sbtarget.GetGloballyUniqueID() in self.state.providers
        return {"provider": "on" if on else "off", "lldb_version": version}, \
            "provider: %s%s" % ("on" if on else "off",
                                "" if provider.available() else " (needs %s or later)" % provider.NEEDED)


def lldb_version():
    """LLDB's version as "22.1.8" (from "lldb version 22.1.8"), or its whole version line."""
    words = lldb.SBDebugger.GetVersionString().split()
    return words[2] if len(words) > 2 and words[:2] == ["lldb", "version"] else " ".join(words)


class CacheCommand(_Command):
    spec = catalog.CACHE

    def run(self, given, exe_ctx):
        sbtarget = _need_target(exe_ctx)
        if live_process(sbtarget) is None:
            raise UsageError("the program is not being run: its caches are made by a process's walks")
        target, modules = self.state.live(sbtarget)
        return reports.cache_report([("unwind backtrace (the plugin's walks of this target)", (target, target.plans))],
                                    modules)


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


def run_for_api(spec, options, words) -> dict:
    """plugin.api's runner in LLDB: the object `spec`'s --json prints (errors are ValueError)."""
    debugger = lldb.debugger
    command = next(c for c in globals().values()
                   if isinstance(c, type) and getattr(c, "spec", None) is spec)(debugger, None)
    line = " ".join(shlex.quote(w) for w in options + ["--"] + words)
    given = parse_lldb(spec, line, command.state.sources)
    return command.run(given, lldb.SBExecutionContext(debugger.GetSelectedTarget()))[0]


api.register_runner(Debugger.LLDB, run_for_api)
