"""What the LLDB side keeps between commands: targets, their modules, the defaults.

One state per debugger. The live target and its ModuleMap are kept while
the SBTarget is the same, so decoded tables are reused from stop to stop;
LldbTarget.refresh() drops them when the module list or the process
changes. Static targets (no process) get one LldbTarget per module, see
target.py for why.

The settings (`unwind settings`, see SETTINGS) live here too, so they last
as long as the debugger, across targets and re-runs.
"""

import json

import lldb

from plugin.engine import DEFAULT_SOURCES, UnwindContext
from plugin.settings import find_setting, settings_for
from plugin.modules import ModuleMap

from .target import LldbTarget, arch_of

_STATES = {}

# What `unwind settings NAME VALUE` can change (LLDB 16's Python API cannot add
# entries to LLDB's own `settings set`): the settings plugin/settings.py
# declares for LLDB, in its order. LldbState keeps each as an attribute
# named Setting.key (sources, max_frames, scan_words).
SETTINGS = settings_for("lldb", DEFAULT_SOURCES)


def state_for(debugger):
    """The state of one SBDebugger (several can live in one Python process)."""
    key = debugger.GetID() if debugger is not None and debugger.IsValid() else None
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = LldbState()
    return state


class LldbState:
    def __init__(self):
        for setting in SETTINGS:        # scan_words is given to every LldbTarget; UnwindContext reads it there
            setattr(self, setting.key, setting.default_value(DEFAULT_SOURCES))
        self._live = None           # (LldbTarget, ModuleMap)
        self._static = {}           # (module path, uuid) -> (LldbTarget, ModuleMap)
        self.provider_wanted = True     # `unwind provider on|off`: register it on targets as they stop (provider.py)
        self.providers = {}         # SBTarget's globally unique id -> the id of its registered frame provider (provider.py)
        self.supplied = {}          # (thread id, stop id) -> {physical level: pc} the provider supplied

    def live(self, sbtarget, read_settings=True):
        """(LldbTarget, ModuleMap) of sbtarget's stopped process.

        read_settings=False keeps LLDB's settings as the last command read
        them: the frame provider runs while LLDB holds a lock that
        SBDebugger.GetSetting takes too (LLDB 22.1 aborts).
        """
        if self._live is None or self._live[0].sbtarget != sbtarget:
            self._live = self._make(sbtarget)
        else:
            self._live[0].refresh()
        self._live[0].scan_words = self.scan_words
        if read_settings or not hasattr(self._live[0], "trap_handler_names"):
            self._live[0].trap_handler_names = trap_handler_names(sbtarget) if read_settings else ()
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
        """The value of one setting as `unwind settings NAME VALUE` takes it; ValueError if unknown."""
        setting = find_setting(name, SETTINGS)
        return setting.format(getattr(self, setting.key))

    def change(self, name, text):
        """Validate `text` and set it; ValueError (one line) leaves the setting as it was."""
        setting = find_setting(name, SETTINGS)
        setattr(self, setting.key, setting.parse(text, DEFAULT_SOURCES))

    def settings_json(self):
        return {setting.key: _json_value(getattr(self, setting.key)) for setting in SETTINGS}


def _json_value(value):
    return list(value) if isinstance(value, tuple) else value


def trap_handler_names(sbtarget):
    """LLDB's own `target.trap-handler-names` (the plugin's walk honours it as LLDB's does), or ()."""
    try:
        data = sbtarget.GetDebugger().GetSetting("target.trap-handler-names")
        stream = lldb.SBStream()
        data.GetAsJSON(stream)
        names = json.loads(stream.GetData() or "[]")
    except Exception:       # an LLDB without the setting or GetSetting: no trap handlers
        return ()
    return tuple(name for name in names if isinstance(name, str))
