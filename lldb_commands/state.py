"""What the LLDB side keeps between commands: targets, their modules, the defaults.

One state per debugger. The live target and its ModuleMap are kept while
the SBTarget is the same, so decoded tables are reused from stop to stop;
LldbTarget.refresh() drops them when the module list or the process
changes. Static targets (no process) get one LldbTarget per module, see
target.py for why.

The settings (`unwind settings`, see SETTINGS) live here too, so they last
as long as the debugger, across targets and re-runs.
"""

from plugin.engine import DEFAULT_SOURCES, STRATEGIES, UnwindContext, parse_sources
from plugin.settings import DEFAULT_MAX_FRAMES, DEFAULT_SCAN_WORDS, MAX_SCAN_WORDS
from plugin.modules import ModuleMap

from .target import LldbTarget, arch_of

_STATES = {}

# What `unwind settings NAME VALUE` can change (LLDB 16's Python API cannot add
# entries to LLDB's own `settings set`): name -> (LLDB-style type, value syntax,
# meaning), in the order `unwind settings` lists them. The same settings as
# GDB's `set unwind sources|max-frames|scan-words`.
SETTINGS = {
    "sources": ("list", "LIST", "the unwind sources every frame tries, in this order; a source not "
                                "listed is off (comma-separated: %s)" % ", ".join(STRATEGIES)),
    "max-frames": ("unsigned", "N", "a walk stops with depth-limit after N frames (at least 1)"),
    "scan-words": ("unsigned", "N", "how many stack words above sp the scan source reads per frame "
                                    "(1 to 1048576)"),
}


def state_for(debugger):
    """The state of one SBDebugger (several can live in one Python process)."""
    key = debugger.GetID() if debugger is not None and debugger.IsValid() else None
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = LldbState()
    return state


class LldbState:
    def __init__(self):
        self.sources = DEFAULT_SOURCES
        self.max_frames = DEFAULT_MAX_FRAMES
        self.scan_words = DEFAULT_SCAN_WORDS     # given to every LldbTarget; UnwindContext reads it there
        self._live = None           # (LldbTarget, ModuleMap)
        self._static = {}           # (module path, uuid) -> (LldbTarget, ModuleMap)

    def live(self, sbtarget):
        """(LldbTarget, ModuleMap) of sbtarget's stopped process."""
        if self._live is None or self._live[0].sbtarget != sbtarget:
            self._live = self._make(sbtarget)
        else:
            self._live[0].refresh()
        self._live[0].scan_words = self.scan_words
        return self._live

    def static(self, sbtarget, sbmodule):
        """(LldbTarget, ModuleMap) showing one module of a target with no process."""
        key = (sbmodule.GetFileSpec().fullpath, sbmodule.GetUUIDString())
        cached = self._static.get(key)
        if cached is None or cached[0].sbtarget != sbtarget:
            cached = self._static[key] = self._make(sbtarget, sbmodule)
        else:
            cached[0].refresh()
        cached[0].scan_words = self.scan_words
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

    # -- settings --------------------------------------------------------------------
    def setting(self, name):
        """The value of one setting as `unwind settings NAME VALUE` takes it."""
        if name == "sources":
            return ",".join(self.sources)
        if name == "max-frames":
            return str(self.max_frames)
        if name == "scan-words":
            return str(self.scan_words)
        raise ValueError("unknown setting %r; the settings are: %s" % (name, ", ".join(SETTINGS)))

    def change(self, name, text):
        """Validate `text` and set it; ValueError (one line) leaves the setting as it was."""
        if name == "sources":
            self.sources = parse_sources(text)
        elif name == "max-frames":
            self.max_frames = _whole_number(name, text, 1, None)
        elif name == "scan-words":
            self.scan_words = _whole_number(name, text, 1, MAX_SCAN_WORDS)
        else:
            self.setting(name)      # raises: unknown setting

    def settings_json(self):
        return {"sources": list(self.sources), "max_frames": self.max_frames, "scan_words": self.scan_words}


def _whole_number(name, text, low, high):
    try:
        value = int(text.strip(), 0)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        bounds = "of at least %d" % low if high is None else "from %d to %d" % (low, high)
        raise ValueError("%s must be a whole number %s, not %r" % (name, bounds, text))
    return value
