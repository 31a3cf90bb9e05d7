"""The `unwind ...` commands and `set/show unwind ...` settings for GDB.

Every command turns any failure into a one-line gdb.GdbError, so a user
never sees a Python traceback; the work itself is done by plugin.commands.reports.
"""

import json

import gdb

from plugin.commands import reports
from plugin.engine import STRATEGIES, parse_sources
from plugin.settings import MAX_SCAN_WORDS

from . import native

DOC_SOURCES = "Sources: " + ", ".join(STRATEGIES) + "."


def _guard(function):
    """Run a command body; any unexpected error becomes a one-line GDB error."""
    def run(self, argument, from_tty):
        try:
            function(self, argument, from_tty)
        except gdb.GdbError:
            raise
        except ValueError as exc:
            raise gdb.GdbError("unwind: %s" % exc) from None
        except Exception as exc:
            raise gdb.GdbError("unwind: internal error: %s: %s" % (type(exc).__name__, exc)) from None
    return run


class Options:
    """GDB-style options: -json, -sources LIST, then positional words."""

    def __init__(self, argument, allowed, defaults):
        self.json = False
        self.sources = defaults
        self.words = []
        argv = gdb.string_to_argv(argument or "")
        i = 0
        while i < len(argv):
            word = argv[i]
            if word == "--":
                self.words.extend(argv[i + 1:])
                break
            if word.startswith("-") and not _is_number(word):
                name = word.lstrip("-")
                if name not in allowed:
                    raise ValueError("unknown option %s (options: %s)" % (word, " ".join("-" + a for a in allowed)))
                if name == "json":
                    self.json = True
                elif name == "sources":
                    if i + 1 >= len(argv):
                        raise ValueError("-sources needs a list, e.g. -sources cfi,frame-pointer")
                    i += 1
                    self.sources = parse_sources(argv[i])
            else:
                self.words.append(word)
            i += 1


def _is_number(word):
    try:
        int(word, 0)
        return True
    except ValueError:
        return False


def _complete_options(text, options):
    return [o for o in options if o.startswith(text)]


def _need_process():
    if gdb.selected_inferior().pid == 0 and not gdb.selected_inferior().threads():
        raise gdb.GdbError("unwind: the program is not being run")
    try:
        gdb.selected_frame()
    except gdb.error:
        raise gdb.GdbError("unwind: no frame selected (is the program stopped?)") from None


def _emit(as_json, data, text):
    if as_json:
        gdb.write(json.dumps(data, indent=1) + "\n")
    else:
        gdb.write(text + "\n")


class UnwindPrefix(gdb.Command):
    """Recover the stack from unwind tables and explain every frame.

Subcommands: backtrace, explain, tables, compare, modules.
Settings: see "help set unwind"."""

    def __init__(self):
        super().__init__("unwind", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, prefix=True)

    def invoke(self, argument, from_tty):
        if argument.strip():
            raise gdb.GdbError("unwind: unknown subcommand %r; try \"help unwind\"" % argument.strip())
        gdb.execute("help unwind", from_tty)


class _UnwindCommand(gdb.Command):
    options = ()

    def __init__(self, name, state):
        super().__init__("unwind " + name, gdb.COMMAND_STACK)
        self.state = state

    def complete(self, text, word):
        if word is not None and word.startswith("-"):
            return _complete_options(word, ["-" + o for o in self.options])
        return gdb.COMPLETE_NONE

    def walk(self, sources, limit=None):
        state = self.state
        arch = state.refresh_arch()
        registers, exact, level = native.innermost_registers(arch)
        bt = reports.backtrace(state.target, state.modules, registers, exact, sources,
                               state.max_frames, first_level=level, limit=limit)
        return arch, bt


class BacktraceCommand(_UnwindCommand):
    """Print the plugin's own backtrace from the selected frame.

Usage: unwind backtrace [-json] [-sources LIST] [N]
One line per frame: level, pc, function, module, and which source found it
(e.g. "found by: .eh_frame CFI"), then the reason the walk stopped.
N limits the number of frames. -sources picks and orders the sources for
this walk only (see "set unwind sources"). """

    options = ("json", "sources")

    @_guard
    def invoke(self, argument, from_tty):
        opts = Options(argument, self.options, self.state.sources)
        limit = None
        if opts.words:
            if len(opts.words) > 1 or not _is_number(opts.words[0]) or int(opts.words[0], 0) <= 0:
                raise gdb.GdbError("unwind backtrace: expected a positive frame count, got %r"
                                   % " ".join(opts.words))
            limit = int(opts.words[0], 0)
        _need_process()
        arch, bt = self.walk(opts.sources, limit)
        _emit(opts.json, *reports.backtrace_report(bt, arch))


class ExplainCommand(_UnwindCommand):
    """Explain how the plugin recovered one frame, or all of them.

Usage: unwind explain [-json] [-sources LIST] [LEVEL|all]
Shows the module and section, the table entry (FDE and CIE offsets and the
range they cover), the row in readable form (CFA=rsp+16 => rip=[CFA-8]),
every value read and the address it came from, the sources tried first and
why they were rejected, and whether GDB's own unwinder agrees.
LEVEL counts physical frames from the innermost one (default: the selected frame's)."""

    options = ("json", "sources")

    def complete(self, text, word):
        if word is not None and word.startswith("-"):
            return super().complete(text, word)
        return [w for w in ("all",) if w.startswith(word or "")]

    @_guard
    def invoke(self, argument, from_tty):
        opts = Options(argument, self.options, self.state.sources)
        if len(opts.words) > 1:
            raise gdb.GdbError("unwind explain: expected one LEVEL or \"all\", got %r" % " ".join(opts.words))
        which = opts.words[0] if opts.words else None
        if which not in (None, "all"):
            if not _is_number(which) or int(which, 0) < 0:
                raise gdb.GdbError("unwind explain: LEVEL must be a frame number or \"all\", not %r" % which)
            which = int(which, 0)
        _need_process()
        state = self.state
        arch = state.refresh_arch()
        if which is None:
            which = gdb.selected_frame().level()
        registers, exact, _ = native.innermost_registers(arch, gdb.newest_frame())
        bt = reports.backtrace(state.target, state.modules, registers, exact, opts.sources, state.max_frames)
        reports.attach_native(bt, native.native_frames(state, len(bt.frames) + 1),
                              state.context(opts.sources))
        _emit(opts.json, *reports.explain_report(bt, arch, which))


class TablesCommand(_UnwindCommand):
    """Show every unwind table entry that covers an address or function.

Usage: unwind tables [-json] ADDRESS|FUNCTION
Like LLDB's "image show-unwind": every source's entry and the row in force."""

    options = ("json",)

    def complete(self, text, word):
        if word is not None and word.startswith("-"):
            return super().complete(text, word)
        return gdb.COMPLETE_SYMBOL

    @_guard
    def invoke(self, argument, from_tty):
        opts = Options(argument, self.options, self.state.sources)
        if not opts.words:
            raise gdb.GdbError("unwind tables: give an ADDRESS or FUNCTION, e.g. \"unwind tables main\"")
        expression = " ".join(opts.words)
        try:
            value = gdb.parse_and_eval(expression)
            if value.type.code == gdb.TYPE_CODE_FUNC:
                value = value.address
            address = int(value)
        except (gdb.error, ValueError) as exc:
            raise gdb.GdbError("unwind tables: cannot evaluate %r: %s" % (expression, exc)) from None
        self.state.refresh_arch()
        _emit(opts.json, *reports.tables_report(self.state.target, self.state.modules, address))


class CompareCommand(_UnwindCommand):
    """Compare the plugin's frames with GDB's own, frame by frame.

Usage: unwind compare [-json] [-sources LIST]
GDB's frames are computed with the plugin's unwinder disabled. Each
disagreement is marked, with which side looks right where the code can tell
(a return address must be executable and follow a call instruction)."""

    options = ("json", "sources")

    @_guard
    def invoke(self, argument, from_tty):
        opts = Options(argument, self.options, self.state.sources)
        if opts.words:
            raise gdb.GdbError("unwind compare: unexpected argument %r" % " ".join(opts.words))
        _need_process()
        state = self.state
        arch = state.refresh_arch()
        registers, exact, _ = native.innermost_registers(arch, gdb.newest_frame())
        bt = reports.backtrace(state.target, state.modules, registers, exact, opts.sources, state.max_frames)
        theirs = native.native_frames(state, len(bt.frames) + 16)
        _emit(opts.json, *reports.compare_report(bt, theirs, state.context(opts.sources)))


class ModulesCommand(_UnwindCommand):
    """List each module, its base address, and which unwind tables were found where.

Usage: unwind modules [-json]"""

    options = ("json",)

    @_guard
    def invoke(self, argument, from_tty):
        opts = Options(argument, self.options, self.state.sources)
        if opts.words:
            raise gdb.GdbError("unwind modules: unexpected argument %r" % " ".join(opts.words))
        _need_process()
        self.state.refresh_arch()
        _emit(opts.json, *reports.modules_report(self.state.modules))


class SetUnwind(gdb.Command):
    """Settings of the unwind plugin."""

    def __init__(self, verb):
        super().__init__("%s unwind" % verb, gdb.COMMAND_STACK, gdb.COMPLETE_NONE, prefix=True)


class SourcesParameter(gdb.Parameter):
    """Which unwind sources the plugin uses, in order (comma-separated).

Used by GDB's backtrace (table sources; fallbacks only with "set unwind fallback on")
and as the default of every "unwind" command."""

    set_doc = "Set the unwind sources, in order."
    show_doc = "Show the unwind sources, in order."

    def __init__(self, state):
        super().__init__("unwind sources", gdb.COMMAND_STACK, gdb.PARAM_STRING)
        self.state = state
        self.value = ",".join(state.sources)

    def get_set_string(self):
        try:
            self.state.sources = parse_sources(self.value or "")
        except ValueError as exc:
            self.value = ",".join(self.state.sources)
            raise gdb.GdbError("unwind sources: %s" % exc) from None
        self.value = ",".join(self.state.sources)
        gdb.invalidate_cached_frames()
        return "unwind sources: %s" % self.value

    def get_show_string(self, value):
        return "The unwind sources, in order, are %s. %s" % (value, DOC_SOURCES)


class MaxFramesParameter(gdb.Parameter):
    """The most frames an "unwind" walk recovers before stopping with depth-limit."""

    set_doc = "Set the maximum number of frames an unwind walk recovers."
    show_doc = "Show the maximum number of frames an unwind walk recovers."

    def __init__(self, state):
        super().__init__("unwind max-frames", gdb.COMMAND_STACK, gdb.PARAM_ZUINTEGER)
        self.state = state
        self.value = state.max_frames

    def get_set_string(self):
        if self.value < 1:
            self.value = self.state.max_frames
            raise gdb.GdbError("unwind max-frames: must be at least 1")
        self.state.max_frames = self.value
        return "unwind max-frames: %d" % self.value

    def get_show_string(self, value):
        return "An unwind walk stops after %s frames." % value


class FallbackParameter(gdb.Parameter):
    """Whether GDB's backtrace may use the plugin's frame-pointer and stack-scan frames.

Off by default, so GDB's own heuristics keep their place unless asked."""

    set_doc = "Set whether GDB's backtrace uses the plugin's fallback sources."
    show_doc = "Show whether GDB's backtrace uses the plugin's fallback sources."

    def __init__(self, state):
        super().__init__("unwind fallback", gdb.COMMAND_STACK, gdb.PARAM_BOOLEAN)
        self.state = state
        self.value = state.claim_fallback

    def get_set_string(self):
        self.state.claim_fallback = bool(self.value)
        gdb.invalidate_cached_frames()
        return "unwind fallback: %s" % ("on" if self.value else "off")

    def get_show_string(self, value):
        return "GDB's backtrace %s the plugin's fallback sources." % ("uses" if value == "on" else "does not use")


class ScanWordsParameter(gdb.Parameter):
    """How many stack words the "scan" source reads above sp, per frame, looking for a return address."""

    set_doc = "Set how many stack words the scan source reads per frame."
    show_doc = "Show how many stack words the scan source reads per frame."

    def __init__(self, state):
        super().__init__("unwind scan-words", gdb.COMMAND_STACK, gdb.PARAM_ZUINTEGER)
        self.state = state
        self.value = state.target.scan_words

    def get_set_string(self):
        if not 1 <= self.value <= MAX_SCAN_WORDS:
            self.value = self.state.target.scan_words
            raise gdb.GdbError("unwind scan-words: must be between 1 and 1048576")
        self.state.target.scan_words = self.value      # every UnwindContext reads it from the target
        gdb.invalidate_cached_frames()
        return "unwind scan-words: %d" % self.value

    def get_show_string(self, value):
        return "The scan source reads %s stack words per frame." % value


def register(state):
    UnwindPrefix()
    for name, cls in (("backtrace", BacktraceCommand), ("explain", ExplainCommand),
                      ("tables", TablesCommand), ("compare", CompareCommand),
                      ("modules", ModulesCommand)):
        cls(name, state)
    SetUnwind("set")
    SetUnwind("show")
    SourcesParameter(state)
    MaxFramesParameter(state)
    if any(s in STRATEGIES for s in ("frame-pointer", "scan")):
        FallbackParameter(state)
    if "scan" in STRATEGIES:
        ScanWordsParameter(state)
