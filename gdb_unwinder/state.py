"""What the GDB side keeps between stops: the target, its modules, the settings.

Caches of decoded tables live in the modules and are dropped when GDB's
objfiles change or the process exits; the mapping list (stack, JIT code) is
dropped at every stop, so nothing about the stack outlives a resume.
"""

import gdb

from plugin.engine import DEFAULT_SOURCES, UnwindContext
from plugin.settings import DEFAULT_MAX_FRAMES, DEFAULT_SCAN_WORDS, is_fallback
from plugin.modules import ModuleMap

from .target import GdbTarget


class GdbState:
    def __init__(self):
        self.target = GdbTarget()
        self.modules = ModuleMap(self.target)
        self.sources = DEFAULT_SOURCES
        self.max_frames = DEFAULT_MAX_FRAMES
        self.target.scan_words = DEFAULT_SCAN_WORDS     # `set unwind scan-words`; read by UnwindContext
        self.claim_fallback = False      # may GDB's `bt` use frame-pointer / stack-scan frames?
        self.after_signal = set()        # (pc, sp) of frames interrupted by a signal: exact pc
        self.unwinder = None
        self._unwinder_context = None

    def connect_events(self):
        gdb.events.new_objfile.connect(lambda event: self.modules_changed())
        gdb.events.clear_objfiles.connect(lambda event: self.modules_changed())
        gdb.events.exited.connect(lambda event: self.modules_changed())
        gdb.events.stop.connect(lambda event: self.resumed())
        gdb.events.cont.connect(lambda event: self.resumed())

    def modules_changed(self):
        self.target.invalidate()
        if self._unwinder_context is not None:
            self._unwinder_context.forget_process_state()
        self.after_signal.clear()

    def resumed(self):
        self.target._mappings = None
        if self._unwinder_context is not None:
            self._unwinder_context.forget_process_state()
        self.after_signal.clear()

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
        return UnwindContext(self.target, self.modules, sources or self.sources)

    def unwinder_context(self):
        """The context GDB's unwinder uses, rebuilt only when the settings change."""
        sources = self.unwinder_sources()
        if self._unwinder_context is None or self._unwinder_context.sources != sources:
            self._unwinder_context = self.context(sources)
        return self._unwinder_context

    def unwinder_sources(self):
        """The sources GDB's `bt` may use: table sources, plus fallbacks only when enabled."""
        if self.claim_fallback:
            return self.sources
        return tuple(s for s in self.sources if not is_fallback(s))
