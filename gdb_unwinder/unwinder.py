"""The frame unwinder GDB's own `bt` uses.

For each frame GDB offers, the engine tries the table sources and the
analysis (and the guesses with `set unwind guesses on`); when one recovers
the caller, the unwinder hands GDB the frame id (CFA plus function start)
and every register the row restores, plus callee-saved registers that are
unchanged. Otherwise it declines and GDB's own unwinders carry on. Under
`claim auto` it also declines where GDB's own unwinders give the very same
frame (gdb_unwinder/claim.py).
It never raises into GDB: an internal error declines the frame and is kept
for `unwind explain`.
"""
from __future__ import annotations

import collections
import traceback

import gdb
from gdb.unwinder import Unwinder

from plugin.engine import step_frame
from plugin.debugger_heuristic import same_as_debugger, yields_to_debugger
from plugin.model.evidence import Frame
from plugin.plans import replay
from plugin.settings import SourceKind, kind_of

from .fast_claims import FastClaims
from .frame_ids import FrameIds
from .claim import NOT_COVERED, Claim, arm_prologue_gives
from .declines import DeclineChecks
from .levels import is_innermost_physical
from .compat import pending_level
from .handover import Asked, Found, LastClaim, descriptors_of, frame_key, hand_over, ruled_registers
from .registers import PendingRegisters
from .stop_answers import StopAnswers
from . import sigtramp

NAME = "unwind-plugin"


class PluginUnwinder(DeclineChecks, Unwinder):
    """GDB's unwinder API, as the policy: decline, exact pc, replay, slow path, hand-over."""

    def __init__(self, state):
        super().__init__(NAME)
        self.state = state
        self.declines = collections.deque(maxlen=256)   # (level, pc, reason) for `unwind explain`
        self.memo = StopAnswers()       # the answers of this stop, kept while GDB rebuilds its frames
        self.ids = FrameIds()           # the frame ids given at this stop (raised past an exception stack)
        self.fast = FastClaims(state, self.handed, self.memo, self.ids)
        self._last = None       # LastClaim of the previous call, if it claimed
        self.claimed = 0
        self._epoch = state.epoch       # the state's epoch the decisions below were made in
        self._quiet = None      # the gdb.Inferior whose every frame is left to GDB (leaves_all_to_gdb)
        self._loud = set()      # the gdb.Inferiors found to need a look at each frame
        self._by_pc = None      # the decline by pc of __call__, kept by _covered_by_pc: (gdb.Inferior,
        #   gdb.Architecture, its pc register, pc mask, the dict of CallerVerdicts.verdicts and that cache)
        self._may_be_quiet = True
        self.then = None        # asked for a frame it declined and did not leave to GDB (kernel_frames)
        self.left = None        # (exact pc?, the engine's Outcome) of the frame just declined as outermost
        #   or a signal frame: `then` need not step it again

    @property
    def may_be_quiet(self) -> bool:
        """May it decline every frame unseen where it has nothing to add? (Tests turn it off to see
        every frame's own verdict.)"""
        return self._may_be_quiet

    @may_be_quiet.setter
    def may_be_quiet(self, value):
        self._may_be_quiet = bool(value)
        self.reconsider()

    def reconsider(self):
        """A stop, a resume, changed modules or settings: whether to look at frames is decided again."""
        self._epoch = self.state.epoch
        self._quiet = None
        self._loud.clear()
        self._by_pc = None
        self._last = None       # a claim of another stop: its caller is not the frame GDB asks about next
        self.fast.clear()
        self.memo.clear()
        self.ids.clear()

    def _catch_up(self):
        self.state.catch_up()           # events since the last call: this may move the epoch
        if self._epoch != self.state.epoch:
            self.reconsider()

    def leaves_all_to_gdb(self) -> bool:
        """Does the unwinder decline every frame of the selected inferior without looking at it?"""
        self._catch_up()
        return self._quiet is not None and gdb.selected_inferior() is self._quiet

    # -- the policy ----------------------------------------------------------------------
    def __call__(self, pending_frame):
        state = self.state
        if state.pending.any:
            state.catch_up()            # events since the last call: this may move the epoch
        if self._epoch != state.epoch:
            self.reconsider()
        last = self._last
        if last is None:
            quick = self._by_pc
            if quick is not None and gdb.selected_inferior() is quick[0]:
                # Decline, the common case under auto: a caller frame whose return address GDB
                # covers, decided from its pc alone (what _covered_by_pc keeps, inline: every
                # frame GDB covers comes here, and a call costs as much as the rest).
                _, gdb_arch, pc_register, mask, verdicts, cache = quick
                try:        # a frame whose own pc was not saved raises here ("PC not saved"): the full path
                    level = pending_frame.level() if pending_frame.architecture() is gdb_arch else 0
                    pc = int(pending_frame.read_register(pc_register)) & mask if level > 0 else None
                except Exception:
                    level = 0
                if level > 0:
                    depth, reason = verdicts.get(pc, NOT_COVERED)
                    if level > depth:
                        cache.hits += 1
                        self.declines.append((level, pc, reason))
                        return None
        else:
            self._last = None
            try:
                info = self.fast.answered(pending_frame, last)      # replay: an answer computed ahead
            except Exception:       # a frame GDB cannot describe (no pc): the full path declines it
                info = None
            if info is not None:
                return info
        selected = gdb.selected_inferior()
        claim = state.claim             # a Claim value (a str): passed down, not read back
        if selected is self._quiet or claim == Claim.NONE:
            return None         # decline: nothing the plugin could claim, or claiming is off
        inferior = state.inferior_of(selected)
        target = inferior.target
        memo = self.memo
        key = None
        if state.use_plans and state.use_stop_answers:
            key, last = frame_key(pending_frame, target, inferior, last)
        if key is not None:
            answer = memo.get(key)
            if answer is not None:      # answered at this stop already: GDB rebuilt its frames
                return self._answer_again(pending_frame, answer)
            memo.begin()
        by_pc = self._by_pc
        self.left = None
        target.inside_unwinder = True
        try:
            info = self._unwind(pending_frame, selected, inferior, claim, last)
        except Exception as exc:        # never break `bt`: decline and remember why
            try:
                pc = int(pending_frame.read_register("pc"))
            except Exception:
                pc = None
            self.declines.append((None, pc, "internal error: %s: %s\n%s" % (
                type(exc).__name__, exc, traceback.format_exc(limit=4))))
            memo.failed()
            info = None
        finally:
            target.inside_unwinder = False
        if info is None and self.then is not None:
            info = self.then(pending_frame, self.left)      # the kernel's frames GDB has no unwinder for
        if key is not None:
            memo.end(key, info, by_pc is not None and self._by_pc is None)
        return info

    def _answer_again(self, pending_frame, answer):
        """GDB's UnwindInfo from an answer kept for this frame (StopAnswers), its claim and declines
        recorded again."""
        self.declines.extend(answer.declines)
        if answer.drops_by_pc:
            self._by_pc = None
        given = answer.given
        if given is None:
            return None
        info = pending_frame.create_unwind_info(given.frame_id)
        any(map(info.add_saved_register, given.registers, given.values))
        if answer.claim is not None:
            self.handed(*answer.claim)
        return info

    def _unwind(self, pending_frame, selected, inferior, claim, last):
        """The policy, in order: under auto, decline what GDB covers (the whole inferior, a caller
        by its pc, the frame's lookup pc, a caller GDB's prologue analyser gives alike); find
        whether the pc is exact; replay the pc's plan (fast, from the callee's claim, or with
        the engine's evaluator); else the slow path (the engine's step and its checks); hand
        the caller over to GDB. Each step that declines records why (`unwind explain`)."""
        auto = claim == Claim.AUTO
        if auto and self._nothing_to_add(pending_frame, selected, inferior):
            return None
        if last is not None and last.inferior is inferior:
            # GDB asks for the frames of a walk in order: the frame above the one the
            # previous call claimed has the registers that claim handed on.
            info = self.fast.claim_next(pending_frame, inferior, last, claim)
            if info is not None:        # replay: a run of answers computed from it
                return info
        pc_value = None
        if auto and not inferior.after_signal:
            pc_value = self._covered_by_pc(pending_frame, selected, inferior)
            if pc_value is True:
                return None
        asked = self._asked(pending_frame, inferior, pc_value)
        if asked is None:
            return None
        if auto and self._caller_covered(pending_frame, asked, inferior):
            return None
        self._exact_pc(asked, inferior)
        if auto and self._gdb_covers(pending_frame, asked, inferior):
            return None
        if not self._callee_registers(asked, inferior, last):
            return None
        if auto and self._heuristic_gives(asked, inferior):
            return None
        plan = self._plan(asked, inferior)
        if plan is not None:
            info = self._replay_fast(pending_frame, asked, inferior, plan)
            if info is not None:
                return info
        found = self._replay(asked, inferior, plan) if plan is not None else None
        if found is None:
            found = self._slow_path(asked, inferior, claim)
            if found is None:
                return None
        if asked.trap:
            inferior.after_signal.add((found.registers[asked.ctx.arch.pc], found.registers.get(asked.ctx.arch.sp)))
            self._by_pc = None       # frames above it are looked up at their exact pc (LLDB's rule)
        return self._hand_over(pending_frame, asked, inferior, found)

    # -- exact pc ----------------------------------------------------------------------------
    def _asked(self, pending_frame, inferior, pc_value):
        """The pending frame's level, pc and registers, or None (declined) where there is no pc
        to unwind from."""
        target = inferior.target
        self._set_arch(target, pending_frame)
        arch = target.arch
        registers = PendingRegisters(pending_frame, arch, target.descriptors)
        if pc_value is not None and not pc_value.is_optimized_out:
            registers.raw[arch.pc] = pc_value       # read by _covered_by_pc already
        pc = registers.get(arch.pc)
        if pc is None:
            return None
        level = pending_level(pending_frame)
        if pc == 0 and level > 0:       # GDB's own unwinders ended on a return address of 0
            self._decline(level, pc, "pc 0 is the end of the stack: left to GDB")
            return None
        return Asked(level, pc, registers, self.state.unwinder_context(inferior))

    def _exact_pc(self, asked, inferior):
        """Is the frame's pc its own (the innermost physical frame, a frame a signal or trap
        interrupted, a trap handler's) rather than a return address?"""
        ctx, registers = asked.ctx, asked.registers
        exact = is_innermost_physical(asked.level, asked.pc, ctx, inferior.inline_depths)
        if not exact and inferior.after_signal:
            exact = (asked.pc, registers.get(ctx.arch.sp)) in inferior.after_signal
        asked.trap = not exact and ctx.trap_handler(asked.pc) is not None
        asked.exact = exact or asked.trap

    def _callee_registers(self, asked, inferior, last):
        """The sp, and the registers the previous call handed GDB for this very frame, if it
        claimed its callee; False (declined) without an sp."""
        sp = asked.registers.get(asked.ctx.arch.sp)
        if sp is None:
            return False
        if last is not None and last.inferior is inferior and (last.pc, last.sp) == (asked.pc, sp):
            asked.handed = last.record
            asked.registers.prefill(last.record)
        return True

    # -- replay ------------------------------------------------------------------------------
    def _plan(self, asked, inferior):
        plans = inferior.plans
        if plans.owner is not asked.ctx:
            plans.clear(asked.ctx)
        return plans.get(asked.lookup, asked.exact) if self.state.use_plans else None

    def _replay_fast(self, pending_frame, asked, inferior, plan):
        """The plan's FastRow applied to the registers the callee's claim handed on, handed to GDB."""
        handed = asked.handed
        if plan.fast is None or handed is None or handed.values is None or asked.trap:
            return None
        return self.fast.claim_one(pending_frame, inferior, plan, handed, asked.ctx)

    def _replay(self, asked, inferior, plan):
        """The engine's accepted row for this pc, replayed, or None."""
        handed = asked.handed
        values = handed.values if handed is not None else None
        replayed = replay(plan, asked.registers if values is None else values, asked.ctx)
        if replayed is None:
            return None
        inferior.plans.hits += 1
        return Found(replayed.registers, replayed.cfa, replayed.start, plan.row.registers)

    # -- slow path ---------------------------------------------------------------------------
    def _slow_path(self, asked, inferior, claim):
        """The engine's step, and the checks that leave a frame to GDB; None where declined."""
        ctx, level, pc = asked.ctx, asked.level, asked.pc
        arch = ctx.arch
        frame = Frame(level=level, pc=pc, registers=asked.registers, method="pending", exact_pc=asked.exact)
        outcome, attempts = step_frame(frame, ctx)
        if outcome is None or outcome.outermost:
            reason = "; ".join("%s: %s" % (a.source, a.reason) for a in attempts) \
                if outcome is None else "outermost frame: left to GDB"
            self._decline(level, pc, reason)
            self.left = (asked.exact, outcome) if outcome is not None else None
            return None
        caller = outcome.registers
        if outcome.signal_frame:
            # Leave signal trampolines to GDB: its sigtramp unwinder recovers the
            # same registers and marks the frame "<signal handler called>", which
            # a Python unwinder cannot; but not where it reads another layout
            # (sigtramp.py) and the interrupted frame lies above this one (GDB stops
            # at a normal frame's caller inner to it: an alternate signal stack above
            # the interrupted one). The interrupted frame above it is ours again,
            # looked up at its exact pc.
            inferior.after_signal.add((caller[arch.pc], caller.get(arch.sp)))
            self._by_pc = None       # frames above it are looked up at their exact pc
            outward = (caller.get(arch.sp) or 0) > (asked.registers.get(arch.sp) or 0)
            if not outward or sigtramp.gdb_misreads(ctx, asked.registers, pc, caller.get(arch.pc, 0)) is None:
                self._decline(level, pc, "signal trampoline: left to GDB's sigtramp unwinder")
                self.left = (asked.exact, outcome)
                return None
        yielded = yields_to_debugger(outcome, frame, ctx)
        if yielded is not None:     # a guess where GDB's own heuristic gives another plausible caller
            self._decline(level, pc, yielded)
            return None
        lookup = asked.lookup
        planned = inferior.plans.remember(lookup, asked.exact, outcome, attempts) if self.state.use_plans else None
        same = None if asked.trap or outcome.signal_frame else (same_as_debugger(outcome, frame, ctx)
                                        if kind_of(outcome.source) == SourceKind.PROOF else None) \
            or arm_prologue_gives(frame, ctx)
        if same is not None:
            if planned is not None:     # a verdict of the pc alone, as its plan is
                inferior.coverage.heuristic_gives(lookup, asked.exact, same)
            if claim == Claim.AUTO:
                self._decline(level, pc, same)
                return None
        start = outcome.evidence.entry.get("start", pc) if outcome.evidence else pc
        return Found(caller, outcome.evidence.cfa, start, ruled_registers(outcome.evidence))

    # -- hand-over ---------------------------------------------------------------------------
    def _hand_over(self, pending_frame, asked, inferior, found):
        """Give GDB the caller's frame id and registers (handover.hand_over) and remember the claim."""
        thread = gdb.selected_thread()
        frame_id = self.ids.frame_id(thread, asked.level, found.cfa, found.start)
        info, record, pc, sp = hand_over(pending_frame, frame_id, asked, inferior.target, found, self.fast.value,
                                         self.memo)
        self.handed(inferior, asked.level, record, pc, sp, thread)
        return info

    def handed(self, inferior, level, record, pc, sp, thread):
        """Remember a claim: for the next call (GDB asks for the caller next) and for `unwind explain`
        (which frames GDB took from the plugin: their sp and pc, nothing heavier per frame)."""
        inferior.claimed.put(sp, pc)
        self._last = LastClaim(level, inferior, record, pc, sp, thread)
        self.claimed += 1
        self.memo.claimed((inferior, level, record, pc, sp, thread))

    # -- helpers -----------------------------------------------------------------------------
    def _set_arch(self, target, pending_frame):
        gdb_arch = pending_frame.architecture()      # GDB hands back one object per gdbarch
        if gdb_arch is not target.gdb_arch:
            target.set_arch(gdb_arch.name())
            target.gdb_arch = gdb_arch
            target.descriptors = descriptors_of(gdb_arch)
