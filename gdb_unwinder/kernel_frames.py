"""The Linux kernel's frames GDB has no unwinder for, after the plugin's unwinder leaves them.

The plugin's unwinder (unwinder.py) leaves two kinds of frame to GDB: a
frame whose caller a signal interrupted (GDB's sigtramp unwinder marks
it), and the outermost frame. In a kernel under QEMU, GDB has neither: no
sigtramp unwinder knows the kernel's interrupt and exception entries, and
its prologue analyser takes the last kernel frame's caller from a user
stack (`#4 0x0000000000000003 in ?? ()`). The plugin's unwinder asks this
one for a frame it declined and did not leave to GDB as covered (its
`then`: one Python unwinder in GDB's list, so a process's frames pay for
no second call), and it answers only for pcs in the kernel module
(plugin.modules.kernel), with the `orc` source:

- an ORC REGS/REGS_PARTIAL entry: the interrupted frame's registers from
  the pt_regs (or iret frame) at the CFA; the plugin's unwinder looks that
  frame up at its exact pc (it noted it in after_signal when it declined);
- a pc in a dynamic ftrace trampoline (no module holds it): the entry of
  the code it copies, at the same offset (orc.in_trampoline);
- an end of the stack (END_OF_STACK, UNDEFINED, or a pt_regs from user
  mode): a frame that saves no pc, so GDB does not invent a caller.

GDB's Python unwinder API cannot mark a frame outermost (py-unwind.c: the
frame id is built by frame_id_build/_wild/_special, never outer_frame_id,
and the stop reason is default_frame_unwind_stop_reason, which says
UNWIND_OUTERMOST only for that id), so unwinding past such a frame raises
"PC not saved". KernelEnd, a frame filter enabled only where a kernel is
among the modules, ends `bt`'s frames at the frame this unwinder proved
outermost, so `bt` ends there cleanly (`bt -no-filters` still ends with the error). The
proof is kept until the process runs again (InferiorState.outermost), not per stop: GDB builds
frame #0 for the stop's report before Python sees the stop event. Frame #0, which this unwinder
leaves to GDB, is also stepped by the filter itself where no proof was kept.
"""
from __future__ import annotations

import collections

import gdb

from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus
from plugin.modules.module import ModuleFormat
from plugin.strategies import orc

from .compat import pending_level
from .handover import Asked, Found, hand_over
from .registers import PendingRegisters
from .stack_end import EndFilter, frames_until

END_NAME = "unwind-plugin-kernel-end"


class KernelFrames:
    """Asked by the plugin's unwinder (PluginUnwinder.then) with GDB's pending frame: an
    UnwindInfo, or None."""

    def __init__(self, state, unwinder):
        self.state = state
        self.unwinder = unwinder        # the plugin's: its claims record (handed), fast claims' values
        self.memo = unwinder.memo       # its StopAnswers: what each answer gave GDB
        self.ids = unwinder.ids         # its FrameIds
        self.declined = collections.deque(maxlen=64)    # (level, pc, why) of its last answers
        self._kernel_known = {}     # id(ModuleMap) -> ((generation, stops), is a kernel among its modules)
        self._newest = (None, False)    # ((epoch, thread, pc, sp), newest_is_outermost's answer) of this stop

    def __call__(self, pending_frame, left=None):
        """left: (exact pc?, Outcome) of the engine's step of this very frame, which the plugin's
        unwinder declined (outermost, or a signal frame); its ORC outcome is not computed again."""
        state = self.state
        if state.claim == "none" or "orc" not in state.sources:
            return None
        try:
            inferior = state.inferior()
            target = inferior.target
            if not self._has_kernel(inferior):
                return None     # the common case (a process): one look at the module list per generation
        except Exception as exc:        # never break `bt`
            self.declined.append((None, None, "internal error: %s: %s" % (type(exc).__name__, exc)))
            return None
        target.inside_unwinder = True       # no GDB command may run while GDB builds frames
        try:
            return self._unwind(pending_frame, inferior, target, left)
        except Exception as exc:        # never break `bt`
            self.declined.append((None, None, "internal error: %s: %s" % (type(exc).__name__, exc)))
            return None
        finally:
            target.inside_unwinder = False

    def kernel_here(self) -> bool:
        """Is a kernel among the selected inferior's modules (the plugin on, with orc)?"""
        state = self.state
        try:
            if state.claim == "none" or "orc" not in state.sources:
                return False
            return self._has_kernel(state.inferior())
        except Exception:       # no process, no target: not a kernel
            return False

    def proved_outermost(self):
        """The (pc, sp) of the frames this unwinder proved outermost since the process last ran: a
        set it adds to as GDB builds frames, emptied at the next resume (InferiorState.outermost).
        Not per stop: GDB builds frame #0 for the stop's own report before the stop event is seen,
        and keeps it."""
        try:
            return self.state.inferior().outermost
        except Exception:
            return frozenset()

    def interrupted(self):
        """The (pc, sp) of the frames an interrupt or exception left since the process last ran (their
        pcs are exact)."""
        try:
            return self.state.inferior().after_signal
        except Exception:
            return frozenset()

    def newest_is_outermost(self, frame) -> bool:
        """Does the ORC entry of the newest frame (a gdb.Frame, its registers GDB's) end the stack?
        Asked where no record says so: this unwinder left frame #0 to GDB, and may never have
        been asked about it (another unwinder answered first)."""
        try:
            inferior = self.state.inferior()
            if not self._has_kernel(inferior):
                return False
            target = inferior.target
            registers = PendingRegisters(frame, target.arch, target.descriptors)
            key = (self.state.epoch, gdb.selected_thread(), registers.get(target.arch.pc), registers.get(target.arch.sp))
        except Exception:       # never break `bt`
            return False
        if self._newest[0] == key:
            return self._newest[1]      # asked again at this stop (GDB built its frames again)
        target.inside_unwinder = True       # the stack's words from the unwinder's page cache, not the gdbstub
        try:
            stepped = self._step(0, registers, inferior)
        except Exception:       # never break `bt`
            return False
        finally:
            target.inside_unwinder = False
        outermost = stepped is not None and stepped[0].outermost
        self._newest = (key, outermost)     # the epoch moves at every stop, resume, write, change of settings
        return outermost

    def _has_kernel(self, inferior) -> bool:
        """Is an x86-64 kernel among the inferior's modules? Kept per module-list generation and stop."""
        modules, target = inferior.modules, inferior.target
        key = (target.generation, getattr(target, "stops", 0))
        known = self._kernel_known.get(id(modules))
        if known is None or known[0] != key:
            arch = target.arch
            here = arch is not None and arch.name == "x86_64" and modules.kernel() is not None
            known = self._kernel_known[id(modules)] = (key, here)
        return known[1]

    def _step(self, level, registers, inferior, left=None):
        """The ORC step of the frame at LEVEL whose registers are REGISTERS, where it is this
        unwinder's (a kernel pc, or ftrace's trampoline): (outcome, pc, sp), else None. A frame proved
        outermost is noted for KernelEnd until the process runs again."""
        arch = inferior.target.arch
        pc, sp = registers.get(arch.pc), registers.get(arch.sp)
        if pc is None or sp is None:
            return None
        ctx = self.state.unwinder_context(inferior)
        module = ctx.modules.find(pc)
        trampoline = module is None and orc.in_trampoline(pc, ctx) is not None     # ftrace's: no module holds it
        if not trampoline and (module is None or module.format != ModuleFormat.KERNEL):
            return None
        exact = level == 0 or (pc, sp) in inferior.after_signal
        if left is not None and left[0] == exact and left[1].source == orc.SOURCE:
            outcome = left[1]       # the engine's step of this frame, the orc source's
        else:
            outcome = orc.step(Frame(level=level, pc=pc, registers=registers, method="pending", exact_pc=exact), ctx)
        if outcome.status != AttemptStatus.RECOVERED or not (outcome.outermost or outcome.signal_frame or trampoline):
            return None         # the plugin's unwinder's business (or nobody's)
        if outcome.outermost:
            inferior.outermost.add((pc, sp))
        return outcome, pc, sp

    def _unwind(self, pending_frame, inferior, target, left):
        arch = target.arch
        registers = PendingRegisters(pending_frame, arch, target.descriptors)
        level = pending_level(pending_frame)
        stepped = self._step(level, registers, inferior, left)
        if stepped is None:
            return None
        outcome, pc, sp = stepped
        evidence = outcome.evidence
        start = evidence.entry.get("ip", pc) if evidence is not None else pc
        cfa = evidence.cfa if evidence is not None and evidence.cfa is not None else sp
        frame_id = self.ids.frame_id(gdb.selected_thread(), level, cfa, start)
        if outcome.outermost:
            if level == 0:
                # Frame #0's caller "not saved" would make every gdb.Frame of #0 fail to build (GDB
                # asks a new frame object's caller), the frame filter's first frame included: leave
                # it to GDB, and KernelEnd ends bt at #0.
                self.declined.append((level, pc, "outermost, frame #0: left to GDB; " + outcome.reason))
                return None
            # rsp only: the caller's pc is "not saved", and GDB's bt ends at this frame.
            self.declined.append((level, pc, "outermost: " + outcome.reason))
            return self._give(pending_frame, frame_id, ["rsp"], [pending_frame.read_register("rsp")])
        # handed as the plugin's unwinder hands a claim (those the entry gives no value, at their callee
        # value: an iret frame's, or a trampoline's caller's) and recorded as its claim, so its unwinder
        # replays the frame above from them (fast claims)
        caller = {number: value & arch.mask for number, value in outcome.registers.items()}
        inferior.after_signal.add((caller[arch.pc], caller.get(arch.sp)))
        info, record, caller_pc, caller_sp = hand_over(
            pending_frame, frame_id, Asked(level, pc, registers, None), target, Found(caller, cfa, start, caller),
            self.unwinder.fast.value, self.memo)
        self.unwinder.handed(inferior, level, record, caller_pc, caller_sp, gdb.selected_thread())
        return info

    def _give(self, pending_frame, frame_id, names, values):
        info = pending_frame.create_unwind_info(frame_id)
        any(map(info.add_saved_register, names, values))
        self.memo.given(frame_id, names, values)
        return info


class KernelEnd(EndFilter):
    """GDB frame filter: `bt`'s frames end at the one KernelFrames proved outermost (the end of the
    kernel stack, a pt_regs from user mode), not at GDB's error unwinding past it. Active only
    where a kernel is among the modules; it walks the frames itself (stack_end.frames_until)."""

    def __init__(self, frames: KernelFrames):
        super().__init__(END_NAME)
        self.frames = frames

    def active(self) -> bool:
        return self.frames.kernel_here()

    def filter(self, frame_iter):
        newest, outermost = gdb.newest_frame(), self.frames.proved_outermost()
        interrupted = self.frames.interrupted()
        # the pcs of both sets, which grow as GDB builds the frames this walk asks for: (size, pcs)
        exact_pcs, end_pcs = [-1, set()], [-1, set()]

        def pcs(known, pairs):
            if known[0] != len(pairs):
                known[0], known[1] = len(pairs), {pc for pc, _ in pairs}
            return known[1]

        def exact(frame, pc):
            return pc in pcs(exact_pcs, interrupted) and (pc, _sp(frame)) in interrupted

        def ends_here(frame, pc):
            at_newest = frame is newest     # frames_until starts from this very object
            if not at_newest and pc not in pcs(end_pcs, outermost):
                return False        # rsp read only where the stack may end
            sp = _sp(frame)
            if sp is None:
                return False
            return (pc, sp) in outermost or at_newest and self.frames.newest_is_outermost(frame)
        return frames_until(newest, ends_here, exact)


def _sp(frame):
    try:
        return int(frame.read_register("rsp")) & 0xFFFFFFFFFFFFFFFF
    except gdb.error:
        return None
