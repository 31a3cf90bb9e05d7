"""LLDB's own frames through the plugin: a scripted frame provider (LLDB 22 and later).

Importing the plugin registers UnwindFrameProvider on every target (see
install()); `unwind provider on|off` switches it. LLDB then asks it for
every frame of every thread (`bt`, `frame select`, `up`/`down`). It only
adds, as the GDB unwinder does:

- LLDB's own frames are passed through (by their index in LLDB's list),
  so they keep their registers and variables;
- where LLDB's list ends (its unwinder stopped) the plugin walks the stack
  from the innermost frame; if every physical frame LLDB had agrees with
  the plugin's (same pc and sp; the pc alone where LLDB has no sp, as
  after a signal trampoline it cannot read), the plugin's further frames are supplied,
  each by its pc, until the plugin's walk ends or, with `unwind settings
  guesses off` (the default), until its first guessed frame (frame-pointer
  chain, stack scan): LLDB's `bt` gets only what the plugin proves.

Any disagreement keeps LLDB's frames and supplies nothing: a verdict
between two unwinders is `unwind compare`'s job, not a silent replacement.
That includes a frame LLDB skipped (a stop at a function's first
instruction in code without tables, where LLDB follows the rbp chain): a
frame inserted there would be given, by LLDB 22.1.8, the registers of
LLDB's own frame at its index, i.e. its caller's, so `register read` and
`frame variable` would show wrong values in it. Supplied frames carry a pc
only (see catalog.PROVIDER).

The supplied frames are recorded in the debugger's state, keyed by thread
and stop, so `unwind explain` says which frames were supplied.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Union

import lldb

try:
    from lldb.plugins.scripted_frame_provider import ScriptedFrameProvider
except ImportError:         # LLDB before 22: no frame providers
    ScriptedFrameProvider = object

from plugin.commands import reports
from plugin.settings import is_guess

from . import native
from .state import state_for
from .target import arch_of

UNKNOWN_SP = 0xFFFFFFFFFFFFFFFF         # LLDB_INVALID_ADDRESS: LLDB could not compute the frame's sp

CLASS_NAME = __name__ + ".UnwindFrameProvider"
HOOK_CLASS = __name__ + ".RegisterAtStop"
NEEDED = "LLDB 22"


def available() -> bool:
    return ScriptedFrameProvider is not object and hasattr(lldb.SBTarget, "RegisterScriptedFrameProvider")


def supplied_key(thread) -> tuple:
    process = thread.GetProcess()
    return thread.GetThreadID(), process.GetStopID()


def other_providers(sbtarget) -> List[str]:
    """The names of the frame providers on sbtarget that are not this plugin's
    (`target frame-provider list`): LLDB 22.1.8 aborts a `bt` with two providers."""
    interpreter = sbtarget.GetDebugger().GetCommandInterpreter()
    listed = lldb.SBCommandReturnObject()
    interpreter.HandleCommand("target frame-provider list", lldb.SBExecutionContext(sbtarget), listed)
    names = [line.split(":", 1)[1].strip() for line in (listed.GetOutput() or "").splitlines()
             if line.strip().startswith("Name:")]
    return [name for name in names if name != CLASS_NAME]


def switch(state, sbtarget, on: bool) -> None:
    """Register (on) or remove (off) the provider on sbtarget; ValueError if LLDB refuses or
    another frame provider is registered there (LLDB 22.1.8 aborts a `bt` with two)."""
    known = state.providers.get(sbtarget.GetGloballyUniqueID())
    if on and known is None:
        others = other_providers(sbtarget)
        if others:
            raise ValueError("another frame provider is registered on this target (%s), and LLDB 22.1.8 "
                             "aborts a backtrace with two: the plugin's is not registered" % ", ".join(others))
        error = lldb.SBError()
        ident = sbtarget.RegisterScriptedFrameProvider(CLASS_NAME, lldb.SBStructuredData(), error)
        if not error.Success() or not ident:
            raise ValueError("LLDB did not register the frame provider: %s" % (error.GetCString() or "no reason given"))
        state.providers[sbtarget.GetGloballyUniqueID()] = ident
    elif not on and known is not None:
        error = sbtarget.RemoveScriptedFrameProvider(known)
        if not error.Success():
            raise ValueError("LLDB did not remove the frame provider: %s" % (error.GetCString() or "no reason given"))
        del state.providers[sbtarget.GetGloballyUniqueID()]


def refresh(state, sbtarget) -> None:
    """After a setting changed: the provider registered anew on sbtarget, so LLDB asks it again
    at this stop (LLDB keeps the frames a provider gave until the next stop otherwise)."""
    if available() and sbtarget.IsValid() and sbtarget.GetGloballyUniqueID() in state.providers:
        switch(state, sbtarget, False)
        switch(state, sbtarget, True)


def ensure(state, sbtarget) -> None:
    """The provider on sbtarget, unless `unwind provider off` turned it off for the debugger."""
    if (state.provider_wanted and sbtarget.IsValid() and sbtarget.GetGloballyUniqueID() not in state.providers
            and not other_providers(sbtarget)):
        switch(state, sbtarget, True)


def install(debugger) -> None:
    """At import (LLDB 22): the provider on every target the debugger has, and for the targets
    created later a stop-hook in LLDB's dummy target, which LLDB copies into every new target.

    LLDB has no Python hook for a new target, and frame providers in the dummy target are not
    copied, so the hook registers the provider at the target's first stop after the initial
    one (`-I false`: LLDB 22.1.8 deadlocks when a provider is registered at a launch's initial
    stop). A target's process that stops only once before `bt` (a core, an attach) gets it at
    any `unwind` command or `unwind provider on`."""
    if not available():
        return
    state = state_for(debugger)
    for index in range(debugger.GetNumTargets()):
        ensure(state, debugger.GetTargetAtIndex(index))
    interpreter = debugger.GetCommandInterpreter()
    in_dummy = lldb.SBExecutionContext(debugger.GetDummyTarget())
    listed = lldb.SBCommandReturnObject()
    interpreter.HandleCommand("target stop-hook list", in_dummy, listed)
    if HOOK_CLASS in (listed.GetOutput() or ""):
        return      # imported again
    added = lldb.SBCommandReturnObject()
    interpreter.HandleCommand("target stop-hook add -I false -P %s" % HOOK_CLASS, in_dummy, added)
    if not added.Succeeded():
        raise RuntimeError("target stop-hook add: %s" % (added.GetError() or "failed").strip())


class RegisterAtStop:
    """The stop-hook install() adds: the provider on the stopped target (see install())."""

    def __init__(self, target, extra_args, internal_dict):
        pass

    def handle_stop(self, exe_ctx, stream) -> bool:
        try:
            sbtarget = exe_ctx.GetTarget()
            ensure(state_for(sbtarget.GetDebugger()), sbtarget)
        except Exception:       # never break a stop: the target goes without the provider
            pass
        return True


class UnwindFrameProvider(ScriptedFrameProvider):

    @staticmethod
    def get_description():
        return "unwind plugin: frames recovered from unwind tables where LLDB's unwinder stops"

    def __init__(self, input_frames, args):
        super().__init__(input_frames, args)
        self._seen: Optional[List[Dict[str, int]]] = []     # LLDB's physical frames, as asked for
        self._registers: Optional[Dict[int, int]] = None    # frame #0's, read when it was asked for
        self._supplied: Optional[List[Dict[str, int]]] = None      # frames after LLDB's last one

    def get_frame_at_index(self, index: int) -> Union[None, int, Dict[str, int]]:
        try:
            size = self.input_frames.GetSize()
            if index < size:
                self._note(index)
                return index
            if self._supplied is None:
                self._supplied = self._extend(size)
            extra = index - size
            return self._supplied[extra] if 0 <= extra < len(self._supplied) else None
        except Exception:       # never break LLDB's own backtrace: supply nothing more
            return None

    def _note(self, index: int) -> None:
        """Record LLDB's frame `index` while LLDB lets us read it.

        LLDB 22.1 aborts ("Resource deadlock avoided") when an input frame
        is read once LLDB has asked past its own frames, and on IsValid(),
        IsInlined(), IsArtificial() or GetCFA() at any time; GetPC(),
        GetSP() and FindRegister() work while frame `index` is being asked
        for. So frames are read here, and an inlined frame is grouped with
        the frames after it by the sp they share (a caller's sp is above
        its callee's), keeping the first pc, as native.physical() does.
        """
        if self._seen is None:
            return
        last = self._seen[-1]["index"] if self._seen else -1
        if index <= last:
            return          # asked again
        if index != last + 1:
            self._seen = None       # a frame was skipped and cannot be read later: supply nothing
            return
        frame = self.input_frames.GetFrameAtIndex(index)
        if index == 0:
            self._registers = native.registers(frame, arch_of(self.target))
        sp, pc = frame.GetSP(), frame.GetPC()
        newer = self._seen[-1] if self._seen else None
        # LLDB gives an inlined frame its concrete frame's pc and sp. Where a call leaves the
        # return address in a register (aarch64, Arm: ra is not the pc), a leaf's caller has
        # the leaf's sp too, so only the pc tells them apart.
        if newer is not None and newer["sp"] == sp and (newer["pc"] == pc or self._call_pushes_return()):
            newer["index"] = index
        else:
            self._seen.append({"index": index, "pc": pc, "sp": sp})

    def _call_pushes_return(self) -> bool:
        """Does a call push the return address on the stack (x86), rather than leave it in a register?"""
        arch = arch_of(self.target)
        return arch.ra == arch.pc

    def _walk(self, frames: int):
        """(LldbTarget, the plugin's frames from frame #0, at most `frames` of them)."""
        state = state_for(self.target.GetDebugger())
        target, modules = state.live(self.target, read_settings=False)
        bt = reports.backtrace(target, modules, self._registers, True, state.sources, min(frames, state.max_frames),
                               step=target.plans.stepper(target.generation))
        return target, bt.frames

    def _extend(self, size: int) -> List[Dict[str, int]]:
        """The frames the plugin recovers after LLDB's last one (input frame size-1), or []."""
        theirs = [dict(f) for f in self._seen or ()]
        if self.thread is None or not theirs or theirs[-1]["index"] != size - 1 or self._registers is None:
            return []
        state = state_for(self.target.GetDebugger())
        target, ours = self._walk(state.max_frames)
        if len(ours) <= len(theirs):
            return []
        for mine, lldbs in zip(ours, theirs):
            known_sp = lldbs["sp"] != UNKNOWN_SP        # LLDB's frame after a trampoline it cannot read
            if mine.pc != lldbs["pc"] or (known_sp and lldbs["sp"] != mine.registers.get(target.arch.sp)):
                return []
        out = []
        for offset, frame in enumerate(ours[len(theirs):]):
            if frame.pc in (None, 0) or (is_guess(frame.method) and not state.claim_guesses):
                break
            out.append({"idx": size + offset, "pc": frame.pc})
        self._record({len(theirs) + i: f["pc"] for i, f in enumerate(out)})
        return out

    def _record(self, levels: Dict[int, int]) -> None:
        """Say in the debugger's state which physical levels were supplied at this stop."""
        state = state_for(self.target.GetDebugger())
        key = supplied_key(self.thread)
        for old in [k for k in state.supplied if k[1] != key[1]]:      # earlier stops: gone
            del state.supplied[old]
        state.supplied.setdefault(key, {}).update(levels)
