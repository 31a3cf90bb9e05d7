"""What the LLDB side keeps between commands: targets, their modules, the defaults.

One state per debugger. The live target and its ModuleMap are kept while
the SBTarget is the same, so decoded tables are reused from stop to stop;
LldbTarget.refresh() drops them when the module list or the process
changes. Static targets (no process) get one LldbTarget per module, see
target.py for why.
"""

from plugin.engine import DEFAULT_MAX_FRAMES, STRATEGIES, UnwindContext
from plugin.evidence import SOURCES
from plugin.modules import ModuleMap

from .target import LldbTarget, arch_of

_STATES = {}


def state_for(debugger):
    """The state of one SBDebugger (several can live in one Python process)."""
    key = debugger.GetID() if debugger is not None and debugger.IsValid() else None
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = LldbState()
    return state


class LldbState:
    def __init__(self):
        self.sources = tuple(s for s in SOURCES if s in STRATEGIES)
        self.max_frames = DEFAULT_MAX_FRAMES
        self._live = None           # (LldbTarget, ModuleMap)
        self._static = {}           # (module path, uuid) -> (LldbTarget, ModuleMap)

    def live(self, sbtarget):
        """(LldbTarget, ModuleMap) of sbtarget's stopped process."""
        if self._live is None or self._live[0].sbtarget != sbtarget:
            self._live = self._make(sbtarget)
        else:
            self._live[0].refresh()
        return self._live

    def static(self, sbtarget, sbmodule):
        """(LldbTarget, ModuleMap) showing one module of a target with no process."""
        key = (sbmodule.GetFileSpec().fullpath, sbmodule.GetUUIDString())
        cached = self._static.get(key)
        if cached is None or cached[0].sbtarget != sbtarget:
            cached = self._static[key] = self._make(sbtarget, sbmodule)
        else:
            cached[0].refresh()
        return cached

    def _make(self, sbtarget, sbmodule=None):
        try:
            arch_of(sbtarget)
        except KeyError:
            raise ValueError("architecture %s is not supported" % (sbtarget.GetTriple() or "unknown")) from None
        target = LldbTarget(sbtarget, sbmodule)
        return target, ModuleMap(target)

    def context(self, target, modules, sources=None):
        return UnwindContext(target, modules, sources or self.sources)
