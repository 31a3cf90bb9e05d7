"""The `unwind ...` commands and `set/show unwind ...` settings for GDB.

Both are built from declarations: each command from its CommandSpec
(plugin/commands/catalog.py: options, words, help), each parameter from its
Setting (plugin/settings.py: type, bounds, default, help). What is GDB's own
is here: reading registers and GDB's frames, evaluating an expression, and
where GdbState keeps each setting. Every command turns any failure into a
one-line gdb.GdbError, so a user never sees a Python traceback; the work
itself is done by plugin.commands.reports.
"""
from __future__ import annotations

import json

import gdb

from plugin.commands import reports
from plugin.commands.catalog import PREFIX_SUMMARY, commands_for
from plugin.commands.options import parse_gdb
from plugin.commands.spec import ArgumentError, CommandSpec, Debugger, WordsKind
from plugin.engine import DEFAULT_SOURCES
from plugin.render.style import Styled, plain
from plugin.settings import Setting, SettingError, SettingType, is_fallback, is_guess, settings_for, source_lines

from . import native
from .claim import claimed_note, why_claimed
from .compat import frame_level, invalidate_cached_frames
from .levels import GdbLevels

GDB = Debugger.GDB


def _guard(name, function):
    """Run a command body; any unexpected error becomes a one-line GDB error."""
    def run(*args):
        try:
            return function(*args)
        except gdb.GdbError:
            raise
        except ArgumentError as exc:        # the words: named by the command
            raise gdb.GdbError("unwind %s: %s" % (name, exc)) from None
        except ValueError as exc:           # options, and the core's own "bad input" errors
            raise gdb.GdbError("unwind: %s" % exc) from None
        except Exception as exc:
            raise gdb.GdbError("unwind: internal error: %s: %s" % (type(exc).__name__, exc)) from None
    return run


def _need_process():
    if gdb.selected_inferior().pid == 0 and not gdb.selected_inferior().threads():
        raise gdb.GdbError("unwind: the program is not being run")
    try:
        gdb.selected_frame()
    except gdb.error:
        raise gdb.GdbError("unwind: no frame selected (is the program stopped?)") from None


# -- what each command does in GDB: (state, Given) -> (json object, text) ------------

def _walk(state, sources, start, limit=None, until_level=None):
    """The plugin's walk from GDB frame `start` (its physical frame), at GDB's levels; it
    reads GDB's frames and unwinds only as far as `limit` or `until_level` need."""
    arch = state.refresh_arch()
    registers, exact, _ = native.innermost_registers(arch, start)
    levels = GdbLevels(start)
    return arch, reports.backtrace(state.target, state.modules, registers, exact, sources, state.max_frames,
                                   first_level=frame_level(start), limit=limit, place=levels.place,
                                   until_level=until_level)


def run_backtrace(state, given):
    _need_process()
    arch, bt = _walk(state, given.sources, gdb.selected_frame(), given.value)
    return reports.backtrace_report(bt, arch, gdb_style())


def run_explain(state, given):
    _need_process()
    which = given.value if given.value is not None else frame_level(gdb.selected_frame())
    arch, bt = _walk(state, given.sources, gdb.newest_frame(), until_level=None if which == "all" else which)
    note_claimed(state, bt)
    reports.attach_native(bt, native.native_frames(state, len(bt.frames) + 1), state.context(given.sources))
    _attach_gdb_bt(state, bt)
    return reports.explain_report(bt, arch, which, given.verbose, _width(), gdb_style())


def _attach_gdb_bt(state, bt):
    """What GDB's own bt made of a frame where the walk alone does not show it: where the walk found
    a frame's caller with a fallback source (analysis, a guess) but the unwinder declined that frame
    (guesses off, GDB's own heuristic gives that caller or another, or its checks failed there), why;
    where the frame's GDB frame id was raised (frame_ids), where it lies."""
    unwinder = state.unwinder
    if unwinder is None or not unwinder.enabled:
        return
    unwinder.declines.clear()
    native.physical_frames(len(bt.frames) + 1)      # GDB's bt as it is, asking the unwinder afresh
    declined = {(level, pc): reason for level, pc, reason in unwinder.declines if level is not None}
    unseen = unwinder.leaves_all_to_gdb()       # every frame declined without a reason (no fallback source)
    thread = gdb.selected_thread()
    for frame in bt.frames:
        note = unwinder.ids.note(thread, frame.level)
        if note is not None and frame.native is not None:
            frame.native["gdb_id"] = note
    for frame, caller in zip(bt.frames, bt.frames[1:]):
        reason = declined.get((frame.level, frame.pc))
        if (reason is not None or unseen) and is_fallback(caller.method) and frame.native is not None:
            off = is_guess(caller.method) and not state.claim_guesses
            frame.native["gdb_bt"] = "the plugin declined this frame, so GDB's own unwinders found its caller: " + (
                "guesses are off (set unwind guesses on)" if off or reason is None else reason)


def note_claimed(state, bt):
    """Mark the frames GDB's `bt` took from the plugin's unwinder (those it handed registers for)."""
    inferior = state.inferior()
    claimed, ctx = inferior.claimed, state.context()
    sp = state.target.arch.sp
    for callee, frame in zip(bt.frames, bt.frames[1:]):
        if frame.pc is not None and claimed.get(frame.registers.get(sp)) == frame.pc:
            why = why_claimed(state.claim, callee, frame, ctx, inferior.coverage)
            frame.claimed = claimed_note(state.claim, callee.level, frame.level, why)


_COLOURS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36,
            "white": 37}
_INTENSITY = {"bold": 1, "dim": 2}


def gdb_style():
    """A styler using GDB's own `style function|address|filename` settings; plain when styling is off."""
    try:
        if not gdb.parameter("style enabled"):
            return plain
        codes = {}
        for kind in Styled:
            parts = []
            colour = gdb.parameter("style %s foreground" % kind.value)
            if colour in _COLOURS:
                parts.append(str(_COLOURS[colour]))
            intensity = gdb.parameter("style %s intensity" % kind.value)
            if intensity in _INTENSITY:
                parts.append(str(_INTENSITY[intensity]))
            codes[kind] = ";".join(parts)
    except RuntimeError:            # a GDB without these settings: no colour
        return plain

    def style(kind, text):
        code = codes.get(kind)
        return "\x1b[%sm%s\x1b[m" % (code, text) if code else text
    return style


def _width():
    """GDB's `width` setting: None when unlimited (0 or None)."""
    try:
        return gdb.parameter("width") or None
    except RuntimeError:
        return None


def run_tables(state, given):
    expression = given.value
    try:
        value = gdb.parse_and_eval(expression)
        if value.type.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        address = int(value)
    except (gdb.error, ValueError) as exc:
        raise gdb.GdbError("unwind tables: cannot evaluate %r: %s" % (expression, exc)) from None
    if gdb.selected_inferior().pid == 0:
        return _static_tables(address)
    state.refresh_arch()
    return reports.tables_report(state.target, state.modules, address, gdb_style())


def _static_tables(address):
    """No process: the tables of the program's file, laid out at its link addresses, as LLDB does."""
    from plugin.modules import ModuleMap
    from plugin.file_targets.elf import FileTarget
    path = gdb.current_progspace().filename
    if not path:
        raise gdb.GdbError("unwind tables: no program and no process; load one with \"file PROGRAM\"")
    try:
        target = FileTarget(path)
    except (OSError, ValueError) as exc:
        raise gdb.GdbError("unwind tables: cannot read %s: %s" % (path, exc)) from None
    modules = ModuleMap(target)
    if target.header_address is None:       # an object file: its sections are the module
        modules.add(target.section_module())
    return reports.tables_report(target, modules, address, gdb_style())


def run_compare(state, given):
    _need_process()
    _, bt = _walk(state, given.sources, gdb.newest_frame())
    theirs = native.native_frames(state, len(bt.frames) + 16)
    return reports.compare_report(bt, theirs, state.context(given.sources), gdb_style())


def run_modules(state, given):
    _need_process()
    state.refresh_arch()
    return reports.modules_report(state.modules)


def run_cache(state, given):
    inferior = state.inferior()
    unwinder = (inferior, inferior.coverage, inferior.coverage.callers, inferior.plans, inferior.unwinder_context,
                inferior.target)
    return reports.cache_report([("GDB's bt (the plugin's unwinder, inferior %d)" % gdb.selected_inferior().num,
                                  unwinder)], inferior.modules)


def run_validate(state, given):
    _need_process()
    from .validate import run_validate as validate
    return validate(state, given, explicit_sources=tuple(given.sources) != tuple(state.sources))


RUN = {"backtrace": run_backtrace, "explain": run_explain, "tables": run_tables,
       "compare": run_compare, "modules": run_modules, "validate": run_validate, "cache": run_cache}


# -- commands, built from their declarations ----------------------------------------

class UnwindPrefix(gdb.Command):
    """`unwind`: lists its subcommands (the help is set from the declarations in register)."""

    def __init__(self):
        super().__init__("unwind", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, prefix=True)

    def invoke(self, argument, from_tty):
        if argument.strip():
            raise gdb.GdbError("unwind: unknown subcommand %r; try \"help unwind\"" % argument.strip())
        gdb.execute("help unwind", from_tty)


class _SpecCommand(gdb.Command):
    """`unwind NAME`; subclassed per declaration (GDB reads the help from the class)."""

    spec: CommandSpec = None

    def __init__(self, state):
        super().__init__("unwind " + self.spec.name, gdb.COMMAND_STACK)
        self.state = state

    def invoke(self, argument, from_tty):
        _guard(self.spec.name, self._invoke)(argument)

    def _invoke(self, argument):
        given = parse_gdb(self.spec, gdb.string_to_argv(argument or ""), self.state.sources)
        data, text = RUN[self.spec.name](self.state, given)
        gdb.write((json.dumps(data, indent=1) if given.json else text) + "\n")

    def complete(self, text, word):
        """Completes from the whole line: GDB splits words at "-" and ",", so `word` alone misleads."""
        candidates, partial = complete_words(self.spec, text, self.state.sources)
        if candidates is None:
            kind = self.spec.words_for(GDB).kind
            return gdb.COMPLETE_SYMBOL if kind in EXPRESSIONS else gdb.COMPLETE_NONE
        cut = len(partial) - len(word or "")       # GDB replaces only `word`, the tail of `partial`
        return [c[cut:] for c in candidates if c.startswith(partial)]


def complete_words(spec, text, sources):
    """(candidates, the partial word they complete) for a line; candidates None: GDB's own symbols."""
    tokens = text.split(" ")
    partial, before = tokens[-1], [t for t in tokens[:-1] if t]
    options = {"-" + o.name: o for o in spec.options_for(GDB)}
    previous = before[-1] if before else ""
    takes = [o for name, o in options.items() if previous.startswith("-") and len(previous) > 1
             and name.startswith(previous) and o.metavar]
    if takes:
        if takes[0].name == "sources":
            done, _, last = partial.rpartition(",")
            head = done + "," if done else ""
            chosen = done.split(",") if done else []
            return [head + s for s in DEFAULT_SOURCES if s not in chosen], partial
        return [], partial
    if partial.startswith("-"):
        return sorted(options), partial
    kind = spec.words_for(GDB).kind
    if kind is WordsKind.LEVEL:
        return ["all"], partial
    if kind in EXPRESSIONS:
        return None, partial
    return [], partial


EXPRESSIONS = (WordsKind.EXPRESSION, WordsKind.OPTIONAL_EXPRESSION)     # words GDB completes as symbols


def _command_class(spec):
    doc = "%s\n\n%s" % (spec.title(GDB, DEFAULT_SOURCES), spec.help(GDB, DEFAULT_SOURCES).rstrip())
    return type(spec.name.capitalize() + "Command", (_SpecCommand,), {"__doc__": doc, "spec": spec})


# -- parameters, built from plugin.settings ------------------------------------------

class SetUnwind(gdb.Command):
    """Settings of the unwind plugin."""

    def __init__(self, verb, state=None):
        super().__init__("%s unwind" % verb, gdb.COMMAND_STACK, gdb.COMPLETE_NONE, prefix=True)
        self.verb, self.state = verb, state

    def invoke(self, argument, from_tty):
        if argument.strip():
            raise gdb.GdbError("unwind: no setting %r; try \"help %s unwind\"" % (argument.strip(), self.verb))
        if self.verb != "show":
            gdb.execute("help set unwind", from_tty)
            return
        for setting in settings_for(GDB.value, DEFAULT_SOURCES):     # every setting, as `show print` lists its own
            shown = gdb.execute("show unwind " + setting.name, to_string=True).strip()
            gdb.write("%s:  %s\n" % (setting.name, shown))


PARAM_KIND = {SettingType.SOURCES: gdb.PARAM_STRING, SettingType.UNSIGNED: gdb.PARAM_STRING,
              SettingType.BOOLEAN: gdb.PARAM_BOOLEAN, SettingType.CHOICE: gdb.PARAM_ENUM,
              SettingType.NAMES: gdb.PARAM_STRING}
# Counts are strings to GDB, read by Setting.parse: GDB's own number parameters evaluate
# their text as an expression ("No symbol table is loaded" for `abc`) and take -1 as unlimited.


def _holder(state, setting):
    """Where GdbState keeps a setting: the Target for what every UnwindContext reads there."""
    return state.target if setting.on_target else state


class _SettingParameter(gdb.Parameter):
    """`set/show unwind NAME`; subclassed per Setting (GDB reads the docs from the class)."""

    setting: Setting = None
    name: str = ""          # the setting's name, or one of its old names (Setting.aliases)

    def __init__(self, state):
        kind = PARAM_KIND[self.setting.type]
        if self.setting.type == SettingType.CHOICE:
            super().__init__("unwind " + self.name, gdb.COMMAND_STACK, kind,
                             [word for word, _ in self.setting.choices])
        else:
            super().__init__("unwind " + self.name, gdb.COMMAND_STACK, kind)
        self.state = state
        self.value = self._gdb_value(self._current())

    def _current(self):
        return getattr(_holder(self.state, self.setting), self.setting.key)

    def _gdb_value(self, value):
        return value if self.setting.type in (SettingType.BOOLEAN, SettingType.CHOICE) else self.setting.format(value)

    def get_set_string(self):
        setting = self.setting
        try:
            if setting.type == SettingType.BOOLEAN:
                value = bool(self.value)
            else:
                value = setting.parse("" if self.value is None else str(self.value), DEFAULT_SOURCES)
        except ValueError as exc:
            self.value = self._gdb_value(self._current())
            problem = exc.problem if isinstance(exc, SettingError) else str(exc)
            raise gdb.GdbError("unwind %s: %s" % (setting.name, problem)) from None
        setattr(_holder(self.state, setting), setting.key, value)
        self.state.reconsider_claims()
        self.value = self._gdb_value(value)
        invalidate_cached_frames()      # GDB's own frames may now unwind differently
        return "unwind %s: %s" % (setting.name, setting.format(value))

    def get_show_string(self, value):
        return self.setting.show(self._current(), DEFAULT_SOURCES)


def _parameter_class(setting, name=None):
    """The parameter `unwind NAME` of a setting; name: one of its old names, which sets the same value."""
    name = name or setting.name
    words = setting.describe(DEFAULT_SOURCES)
    old = "The old name of \"unwind %s\"." % setting.name if name != setting.name else None
    sources = "Sources:\n" + source_lines(DEFAULT_SOURCES) if setting.type == SettingType.SOURCES else None
    return type(name.title().replace("-", "") + "Parameter", (_SettingParameter,), {
        "__doc__": "\n\n".join(filter(None, (words[0].upper() + words[1:] + ".", old, sources,
                                             setting.notes.get(GDB.value)))),
        "setting": setting,
        "name": name,
        # "unwind NAME" in the first line, so `apropos unwind` finds every setting.
        "set_doc": "Set unwind %s: %s." % (name, setting.help),
        "show_doc": "Show unwind %s: %s." % (name, setting.help)})


def register(state):
    commands = commands_for(GDB)
    doc = "%s\n\nSubcommands: %s.\nSettings: see \"help set unwind\"." % (
        PREFIX_SUMMARY, ", ".join(spec.name for spec in commands))
    type("UnwindCommand", (UnwindPrefix,), {"__doc__": doc})()
    for spec in commands:
        _command_class(spec)(state)
    SetUnwind("set")
    SetUnwind("show", state)
    for setting in settings_for(GDB.value, DEFAULT_SOURCES):
        for name in (setting.name,) + setting.aliases:
            _parameter_class(setting, name)(state)
