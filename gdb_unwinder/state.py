"""What the GDB side keeps between stops: per inferior the target and its modules; the settings.

Every inferior (GDB's `inferior N`) has its own GdbTarget, ModuleMap and
unwinder context, so two programs debugged in one session never share a
module list. `state.target`, `state.modules` and `state.context()` are the
selected inferior's, which is also the inferior whose frames GDB is
unwinding when it calls the unwinder.

Caches of decoded tables live in the modules and are dropped when GDB's
objfiles change or the process exits; the mapping list (stack, JIT code) is
dropped at every stop, so nothing about the stack outlives a resume.
"""

import collections
import weakref

import gdb

from plugin.cache import BoundedCache
from plugin.engine import DEFAULT_SOURCES, UnwindContext
from plugin.settings import DEFAULT_MAX_FRAMES, DEFAULT_SCAN_WORDS, is_guess
from plugin.modules import ModuleMap
from plugin.plans import PlanCache

from .claim import Claim, GdbCoverage
from .compat import connect
from .target import GdbTarget


CLAIMED_CACHE_SIZE = 1 << 17      # claimed frames remembered (for `unwind explain`) until the next resume


class InferiorState:
    """One inferior's target, modules, unwinder context and stop-scoped caches."""

    def __init__(self, shared):
        self.target = GdbTarget(shared)
        self.modules = ModuleMap(self.target)
        self.coverage = GdbCoverage()
        self.after_signal = set()        # (pc, sp) of frames interrupted by a signal: exact pc
        self.outermost = set()           # (pc, sp) of kernel frames proved outermost (kernel_frames.KernelEnd)
        # What it remembers (plugin.cache), each with its bound and hit counts; until the modules change:
        self.inline_depths = BoundedCache("inline depths", 1 << 16)   # pc -> inlined-function blocks around it
        # until the next resume (for `unwind explain`):
        self.claimed = BoundedCache("claimed frames", CLAIMED_CACHE_SIZE)   # sp -> pc of each caller frame
        #   GDB's bt took from the unwinder
        self.unwinder_context = None
        self.plans = PlanCache()         # lookup pc -> the engine's accepted row, for the unwinder

    def modules_changed(self):
        self.plans.clear()
        self.target.invalidate()
        self.coverage.invalidate()
        self.inline_depths.clear()
        self.resumed()

    def stopped(self):
        """A stop: the process may have mapped or unmapped memory while it ran.

        GDB may already have built frames for the stop's own report (the
        unwinder recorded signal-interrupted frames then): they stay.
        """
        self.target.forget_mappings()
        if self.unwinder_context is not None:
            self.unwinder_context.forget_process_state()

    def resumed(self):
        """The process ran, or memory or registers were written: GDB rebuilds every frame."""
        self.stopped()
        self.after_signal.clear()
        self.outermost.clear()
        self.claimed.clear()


class PendingEvents:
    """GDB events recorded since the state was last used (GdbState.catch_up), one kind each."""

    def __init__(self):
        self.modules = collections.deque(maxlen=1)     # objfiles loaded, freed or cleared; an exit
        self.resumed = collections.deque(maxlen=1)     # the process ran, or memory or registers changed
        self.stopped = collections.deque(maxlen=1)     # a stop
        self.any = collections.deque(maxlen=1)         # every event above too: one test on the per-frame path


class SharedSettings:
    """Settings every inferior's target reads (`set unwind scan-words`)."""

    def __init__(self):
        self.scan_words = DEFAULT_SCAN_WORDS
        self.trap_handler_names = ()


class GdbState:
    def __init__(self):
        self.shared = SharedSettings()
        self.inferiors = {}              # inferior number -> InferiorState
        self.sources = DEFAULT_SOURCES
        self.max_frames = DEFAULT_MAX_FRAMES
        self.claim_guesses = False       # `set unwind guesses`: may GDB's `bt` use frame-pointer / stack-scan frames?
        self.claim = Claim.AUTO.value    # `set unwind claim`: which frames GDB's `bt` takes from the plugin
        self._unwinder = None            # a weak reference: the unwinder holds the state, not the other way
        self.epoch = 0                   # counts reconsider_claims: the unwinder drops its decisions when it moves
        self.use_plans = True            # replay per-pc plans in the unwinder (tests turn it off to compare)
        self.use_stop_answers = True     # give this stop's answers again when GDB rebuilds its frames (stop_answers.py)
        self.pending = PendingEvents()
        self._last_selected = (None, None)    # (gdb.Inferior, its InferiorState) of the last inferior_of

    # -- the selected inferior's -------------------------------------------------
    def inferior(self):
        if self.pending.any:
            self.catch_up()
        try:
            selected = gdb.selected_inferior()
        except (gdb.error, RuntimeError):
            selected = None
        last, state = self._last_selected       # asked once per frame GDB builds (kernel_frames): kept
        if selected is last and selected is not None:
            return state
        return self.inferior_of(selected)

    def inferior_of(self, selected):
        """The InferiorState of a gdb.Inferior (None: the one numbered 0), made on first use."""
        number = 0 if selected is None else selected.num
        state = self.inferiors.get(number)
        if state is None:
            state = self.inferiors[number] = InferiorState(self.shared)
        self._last_selected = (selected, state)
        return state

    @property
    def unwinder(self):
        """The PluginUnwinder registered with GDB (for the commands and tests), or None."""
        return None if self._unwinder is None else self._unwinder()

    @unwinder.setter
    def unwinder(self, unwinder):
        self._unwinder = None if unwinder is None else weakref.ref(unwinder)

    @property
    def target(self):
        return self.inferior().target

    @property
    def modules(self):
        return self.inferior().modules

    @property
    def after_signal(self):
        return self.inferior().after_signal

    # -- events --------------------------------------------------------------------
    def connect_events(self):
        """GDB's frequent events are recorded by a callable that runs no Python code (a deque's
        append) and acted on at the next use of the state (catch_up). A Ctrl-C pending when an
        event fires would otherwise become a KeyboardInterrupt at the entry of a Python handler,
        which GDB prints and drops: the Ctrl-C lost (gdb.base/bp-cmds-continue-ctrl-c.exp)."""
        pending = self.pending
        for kind, names in ((pending.modules, ("new_objfile", "free_objfile", "clear_objfiles", "exited")),
                            (pending.resumed, ("cont", "memory_changed", "register_changed", "inferior_call")),
                            (pending.stopped, ("stop",))):
            for name in names:      # free_objfile: GDB 13+; inferior_call: a call into the debuggee ran it
                connect(name, kind.append)
                connect(name, pending.any.append)
        connect("inferior_deleted", self._inferior_deleted)    # rare: a Python handler

    def catch_up(self):
        """Act on the events recorded since the state was last used, in the order that keeps
        what each promises: new modules (which includes a resume), a resume, a stop (which keeps
        the frames GDB built for the stop's own report)."""
        pending = self.pending
        pending.any.clear()
        if pending.modules:
            pending.modules.clear()
            self.modules_changed()
        if pending.resumed:
            pending.resumed.clear()
            self.resumed()
        if pending.stopped:
            pending.stopped.clear()
            self.stopped()

    def _inferior_deleted(self, event):
        self.inferiors.pop(getattr(event.inferior, "num", None), None)
        self._last_selected = (None, None)
        self.reconsider_claims()

    def reconsider_claims(self):
        """A setting, the inferiors, the modules or the process changed: the unwinder decides
        again whether it has anything to add (it sees the epoch move: PluginUnwinder.reconsider)."""
        self.epoch += 1

    def modules_changed(self):
        # An objfile event names a program space, not always the inferior it
        # belongs to: every inferior re-reads its modules on next use.
        self.reconsider_claims()
        for state in self.inferiors.values():
            state.modules_changed()

    def stopped(self):
        self.reconsider_claims()
        for state in self.inferiors.values():
            state.stopped()

    def resumed(self):
        self.reconsider_claims()
        for state in self.inferiors.values():
            state.resumed()

    # -- context -----------------------------------------------------------------
    def refresh_arch(self):
        """Arch of the selected frame (or the inferior); raises gdb.GdbError if unsupported."""
        try:
            name = gdb.selected_frame().architecture().name()
        except gdb.error:
            name = gdb.selected_inferior().architecture().name()
        try:
            return self.target.set_arch(name)
        except KeyError:
            raise gdb.GdbError("unwind: architecture %s is not supported" % name) from None

    def context(self, sources=None):
        inferior = self.inferior()
        return UnwindContext(inferior.target, inferior.modules, sources or self.sources)

    def unwinder_context(self, inferior=None):
        """The context GDB's unwinder uses, rebuilt only when the settings change."""
        inferior = inferior or self.inferior()
        ctx = inferior.unwinder_context
        if ctx is not None and ctx.settings == (self.sources, self.claim_guesses):
            return ctx
        sources = self.unwinder_sources()
        if ctx is None or ctx.sources != sources:
            ctx = inferior.unwinder_context = UnwindContext(inferior.target, inferior.modules, sources)
        ctx.settings = (self.sources, self.claim_guesses)     # what `sources` was derived from
        return ctx

    def unwinder_sources(self):
        """The sources GDB's `bt` may use: tables and analysis, plus guesses only when enabled."""
        if self.claim_guesses:
            return self.sources
        return tuple(s for s in self.sources if not is_guess(s))
