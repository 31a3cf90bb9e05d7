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
from plugin.heuristic import same_as_debugger, yields_to_debugger
from plugin.model.evidence import Frame
from plugin.plans import replay
from plugin.settings import SourceKind, kind_of

from .ahead import FastClaims
from .claim import NOT_COVERED, VERDICT_CACHE_SIZE, Claim
from .levels import inline_depth, is_innermost_physical
from .compat import FrameId, pending_level
from .registers import Handed, PendingRegisters, handed_registers

NAME = "unwind-plugin"
CLAIMED_CACHE_SIZE = 1 << 17      # claimed frames remembered (for `unwind explain`) until the next resume


class PluginUnwinder(Unwinder):
    def __init__(self, state):
        super().__init__(NAME)
        self.state = state
        self.declines = collections.deque(maxlen=256)   # (level, pc, reason) for `unwind explain`
        self.fast = FastClaims(state, self.handed)
        self._last = None       # (level, inferior, Handed, (its pc, its sp), thread) of the previous call's claim
        self.claimed = 0
        self._quiet = None      # the gdb.Inferior whose every frame is left to GDB (leaves_all_to_gdb)
        self._loud = set()      # the gdb.Inferiors found to need a look at each frame
        self._declines_by_pc = {}   # gdb.Inferior -> (CallerVerdicts, gdb.Architecture, pc mask): see __call__
        self._may_be_quiet = True

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
        self._quiet = None
        self._loud.clear()
        self._declines_by_pc.clear()
        self.fast.clear()

    def leaves_all_to_gdb(self) -> bool:
        """Does the unwinder decline every frame of the selected inferior without looking at it?"""
        self.state.catch_up()
        return self._quiet is not None and gdb.selected_inferior() is self._quiet

    def __call__(self, pending_frame):
        self.state.catch_up()           # events since the last call: this may reconsider the claims
        selected = gdb.selected_inferior()
        if selected is self._quiet:     # nothing the plugin could claim: GDB unwinds alone
            return None
        declines = self._declines_by_pc.get(selected)
        if declines is not None and self._last is None:
            # Under auto, a caller frame whose return address GDB covers, decided from its pc
            # alone (the check below, with what it needs kept from the last time it held; a
            # change of setting, modules or process drops it: reconsider).
            callers, gdb_arch, mask = declines
            try:
                level = pending_frame.level()
                if level > 0 and pending_frame.architecture() is gdb_arch:
                    pc = int(pending_frame.read_register(callers.pc_register)) & mask
                    depth, reason = callers.verdicts.get(pc, NOT_COVERED)
                    if level > depth:
                        self.declines.append((level, pc, reason))
                        return None
            except Exception:       # an optimized-out pc and the like: the full path says why
                pass
        last, self._last = self._last, None
        claim = self.state.claim
        if claim == Claim.NONE:
            return None
        inferior = self.state.inferior()
        target = inferior.target
        target.inside_unwinder = True
        try:
            if claim == Claim.AUTO and selected not in self._loud:
                if self._nothing_to_add(inferior, pending_frame):
                    self._quiet = selected
                    return None
                self._loud.add(selected)
            if last is not None and last[1] is inferior:
                # GDB asks for the frames of a walk in order: the frame above the one the
                # previous call claimed has the registers that claim handed on.
                info = self.fast.claim_next(pending_frame, inferior, last)
                if info is not None:
                    return info
            pc_value = None
            if claim == Claim.AUTO and not inferior.after_signal:
                # The common case under auto, kept to one register read and one dict look-up:
                # a caller frame whose return address GDB's DWARF unwinder covers.
                callers = inferior.coverage.callers
                level = pending_level(pending_frame)
                if level > 0 and callers.key == (target.generation, target.trap_handler_names,
                                                 pending_frame.architecture()):
                    if hasattr(pending_frame, "level"):     # GDB 11 and later; before, levels are counted
                        self._declines_by_pc[selected] = (callers, callers.key[2], target.arch.mask)
                    pc_value = pending_frame.read_register(callers.pc_register)
                    try:
                        pc = int(pc_value) & target.arch.mask
                    except gdb.error:       # optimized out: the slow path says why
                        pc = None
                    depth, reason = callers.verdicts.get(pc, NOT_COVERED)
                    if level > depth:
                        self.declines.append((level, pc, reason))
                        return None
            return self._unwind(pending_frame, inferior, pc_value, last)
        except Exception as exc:        # never break `bt`: decline and remember why
            try:
                pc = int(pending_frame.read_register("pc"))
            except Exception:
                pc = None
            self.declines.append((None, pc, "internal error: %s: %s\n%s" % (
                type(exc).__name__, exc, traceback.format_exc(limit=4))))
            return None
        finally:
            target.inside_unwinder = False

    def _nothing_to_add(self, inferior, pending_frame):
        """Under auto: no trap handler names, and GDB's DWARF unwinder reads every table the plugin
        has, and no source reads code or the stack (GdbCoverage.leaves_all_to_gdb)."""
        state = self.state
        if not self._may_be_quiet or inferior.target.trap_handler_names:
            return False
        self._set_arch(inferior.target, pending_frame)
        return inferior.coverage.leaves_all_to_gdb(state.unwinder_context(inferior))

    def _set_arch(self, target, pending_frame):
        gdb_arch = pending_frame.architecture()      # GDB hands back one object per gdbarch
        if gdb_arch is not target.gdb_arch:
            target.set_arch(gdb_arch.name())
            target.gdb_arch = gdb_arch
            target.descriptors = _descriptors(gdb_arch)

    def _unwind(self, pending_frame, inferior, pc_value=None, last=None):
        state = self.state
        target = inferior.target
        self._set_arch(target, pending_frame)
        arch = target.arch
        registers = PendingRegisters(pending_frame, arch, target.descriptors)
        if pc_value is not None and not pc_value.is_optimized_out:
            registers.raw[arch.pc] = pc_value       # read by the fast path already
        pc = registers.get(arch.pc)
        if pc is None:
            return None
        level = pending_level(pending_frame)
        if pc == 0 and level > 0:       # GDB's own unwinders ended on a return address of 0
            self.declines.append((level, pc, "pc 0 is the end of the stack: left to GDB"))
            return None
        ctx = state.unwinder_context(inferior)
        if state.claim == Claim.AUTO and level > 0 and not inferior.after_signal:
            depth, reason = self._covered_caller(pc, ctx, pending_frame, inferior)
            if level > depth:
                self.declines.append((level, pc, reason))
                return None
        exact = is_innermost_physical(level, pc, ctx, inferior.inline_depths)
        if not exact and inferior.after_signal:
            exact = (pc, registers.get(arch.sp)) in inferior.after_signal
        trap = not exact and ctx.trap_handler(pc) is not None
        exact = exact or trap
        if state.claim == Claim.AUTO and not trap:      # GDB looks a trap handler up at pc-1: ours is better
            # The common case, kept cheap: one register read and a few dict look-ups.
            lookup = pc if exact else pc - 1
            reason = inferior.coverage.gdb_covers(lookup, ctx, pending_frame, call_site=not exact)
            if reason is not None:
                if lookup in inferior.coverage.signal_pcs:
                    # GDB unwinds the trampoline; the frame it interrupted is
                    # offered to us next and must be looked up at its exact pc.
                    self._note_interrupted(Frame(level=level, pc=pc, registers=registers,
                                                 method="pending", exact_pc=exact), ctx, inferior)
                self.declines.append((level, pc, reason))
                return None
        sp = registers.get(arch.sp)
        if sp is None:
            return None
        # The registers the previous call handed GDB for this very frame, if it claimed its callee.
        handed = last[2] if last is not None and last[1] is inferior and last[3] == (pc, sp) else None
        if handed is not None:
            registers.prefill(handed)
        plans = inferior.plans
        if plans.owner is not ctx:
            plans.clear(ctx)
        lookup = pc if exact else pc - 1
        if state.claim == Claim.AUTO:
            reason = inferior.coverage.heuristic.get((lookup, exact))
            if reason is not None:      # GDB's prologue analyser gives the very caller the analysis proves
                self.declines.append((level, pc, reason))
                return None
        plan = plans.get(lookup, exact) if state.use_plans else None
        if plan is not None and plan.fast is not None and handed is not None and handed.values is not None \
                and not trap:
            info = self.fast.claim_one(pending_frame, inferior, plan, handed, ctx)
            if info is not None:
                return info
        replayed = None
        if plan is not None:
            values = handed.values if handed is not None else None
            replayed = replay(plan, registers if values is None else values, ctx)
        if replayed is not None:        # the engine's accepted row for this pc, replayed
            plans.hits += 1
            caller, cfa, start, ruled = replayed.registers, replayed.cfa, replayed.start, plan.row.registers
        else:
            frame = Frame(level=level, pc=pc, registers=registers, method="pending", exact_pc=exact)
            outcome, attempts = step_frame(frame, ctx)
            if outcome is None or outcome.outermost:
                reason = "; ".join("%s: %s" % (a.source, a.reason) for a in attempts) \
                    if outcome is None else "outermost frame: left to GDB"
                self.declines.append((level, pc, reason))
                return None
            caller = outcome.registers
            if outcome.signal_frame:
                # Leave signal trampolines to GDB: its sigtramp unwinder recovers the
                # same registers and marks the frame "<signal handler called>", which
                # a Python unwinder cannot. The interrupted frame above it is ours
                # again, looked up at its exact pc.
                inferior.after_signal.add((caller[arch.pc], caller.get(arch.sp)))
                self._declines_by_pc.clear()       # frames above it are looked up at their exact pc
                self.declines.append((level, pc, "signal trampoline: left to GDB's sigtramp unwinder"))
                return None
            yielded = yields_to_debugger(outcome, frame, ctx)
            if yielded is not None:     # a guess where GDB's own heuristic gives another plausible caller
                self.declines.append((level, pc, yielded))
                return None
            planned = plans.remember(lookup, exact, outcome, attempts) if state.use_plans else None
            same = same_as_debugger(outcome, frame, ctx) if kind_of(outcome.source) == SourceKind.PROOF and not trap \
                else None
            if same is not None:
                if planned is not None:     # a verdict of the pc alone, as its plan is
                    inferior.coverage.heuristic_gives(lookup, exact, same)
                if state.claim == Claim.AUTO:
                    self.declines.append((level, pc, same))
                    return None
            start = outcome.evidence.entry.get("start", pc) if outcome.evidence else pc
            cfa, ruled = outcome.evidence.cfa, _ruled_registers(outcome.evidence)
        if trap:
            inferior.after_signal.add((caller[arch.pc], caller.get(arch.sp)))   # LLDB's rule: its caller is exact too
            self._declines_by_pc.clear()       # frames above it are looked up at their exact pc
        info = pending_frame.create_unwind_info(FrameId(cfa, start))
        known, raws = registers.known, registers.raw
        descriptors = target.descriptors     # by descriptor: GDB looks no name up
        link = arch.ra if arch.ra != arch.pc else None   # aarch64: the RA column becomes pc
        if link is not None and link not in caller and arch.pc in caller:
            # The caller's link register holds what its call left there, the return
            # address, as GDB's DWARF unwinder gives the RA column; "not saved" would
            # stop GDB's own unwinders for the frames above.
            caller = dict(caller)
            caller[link] = caller[arch.pc]
        raw_given, known_given = {}, {}     # the caller's registers, as Handed keeps them
        complete = True
        for number, name in handed_registers(arch):
            if number in caller:
                value = caller[number]
                raw = raws.get(number)
                if raw is None or known.get(number) != value:
                    raw = self.fast.value(pending_frame, name, value)
            elif number in ruled:
                known_given[number] = None
                continue        # undefined, or its rule could not be evaluated: not saved
            else:
                # GDB's rule for a register the row says nothing about: same
                # value as in the callee (dwarf2/frame.c, "unspecified").
                raw = raws.get(number)
                if raw is None:
                    raw = registers.same_value(number, name)
                    if raw is None:
                        known_given[number] = None
                        continue
                value = known.get(number)
                if value is None:       # read but never needed as a number: the next frame may
                    try:
                        value = int(raw) & arch.mask
                    except (gdb.error, ValueError):
                        value = None
            info.add_saved_register(descriptors.get(name, name), raw)
            raw_given[number] = raw
            if value is None:
                complete = False
            else:
                known_given[number] = value
        self.handed(inferior, level, Handed(raw_given, known_given, complete), caller.get(arch.pc),
                    caller.get(arch.sp))
        return info

    def handed(self, inferior, level, record, pc, sp):
        """Remember a claim: for the next call (GDB asks for the caller next) and for `unwind explain`
        (which frames GDB took from the plugin: their sp and pc, nothing heavier per frame)."""
        claimed = inferior.claimed
        if len(claimed) >= CLAIMED_CACHE_SIZE:
            claimed.clear()
        claimed[sp] = pc
        self._last = (level, inferior, record, (pc, sp), gdb.selected_thread())
        self.claimed += 1

    def _covered_caller(self, pc, ctx, pending_frame, inferior):
        """Under auto, (inline depth at pc, why GDB covers a caller frame at return address pc),
        or NOT_COVERED; kept in the inferior's CallerVerdicts for __call__'s fast path. It is the
        slow path's verdict for a frame that is no innermost physical frame (level above the
        inline depth at pc) and no frame a signal interrupted: not in a trap handler, GDB covers
        pc-1, and pc-1 is in no signal trampoline."""
        target = ctx.target
        callers = inferior.coverage.callers
        key = (target.generation, target.trap_handler_names, target.gdb_arch)
        if key != callers.key:
            callers.reset(key, target.descriptors.get(ctx.arch.registers[ctx.arch.pc],
                                                      ctx.arch.registers[ctx.arch.pc]))
        verdict = callers.verdicts.get(pc)
        if verdict is not None:
            return verdict
        verdict = NOT_COVERED
        if ctx.trap_handler(pc) is None:
            coverage = inferior.coverage
            reason = coverage.gdb_covers(pc - 1, ctx, pending_frame, call_site=True)
            if reason is None:
                reason = coverage.heuristic.get((pc - 1, False))
            elif pc - 1 in coverage.signal_pcs:
                reason = None
            if reason is not None:
                verdict = (inline_depth(pc, inferior.inline_depths), reason)
        if len(callers.verdicts) >= VERDICT_CACHE_SIZE:
            callers.verdicts.clear()
        callers.verdicts[pc] = verdict
        return verdict

    def _note_interrupted(self, frame, ctx, inferior):
        outcome, _ = step_frame(frame, ctx)
        if outcome is not None and outcome.signal_frame and outcome.registers:
            arch = ctx.arch
            inferior.after_signal.add((outcome.registers.get(arch.pc), outcome.registers.get(arch.sp)))
            self._declines_by_pc.clear()       # frames above it are looked up at their exact pc



def _descriptors(gdb_arch):
    """Register name -> gdb.RegisterDescriptor of an architecture (GDB 12 and later), else {}."""
    try:
        return {d.name: d for d in gdb_arch.registers()}
    except (AttributeError, gdb.error):
        return {}


def _ruled_registers(evidence):
    """DWARF numbers the accepted row has a rule for (undefined ones included)."""
    rule = getattr(evidence, "rule", None)
    return getattr(rule, "registers", None) or {}
