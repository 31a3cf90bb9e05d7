"""The GDB unwinder's reasons to leave a frame to GDB under `claim auto`, each recorded for
`unwind explain` (PluginUnwinder's policy calls them in order; see unwinder.py)."""
from __future__ import annotations

import gdb

from plugin.engine import step_frame
from plugin.model.evidence import Frame

from .claim import NOT_COVERED, covered_caller
from .compat import pending_level


class DeclineChecks:
    """Mixed into PluginUnwinder: the checks that decline a frame, and the record of why."""

    def _decline(self, level, pc, reason):
        self.declines.append((level, pc, reason))
        self.memo.declined((level, pc, reason))
        return True

    def _nothing_to_add(self, pending_frame, selected, inferior):
        """Under auto: no trap handler names, and GDB's DWARF unwinder reads every table the plugin
        has, and no source reads code or the stack (GdbCoverage.leaves_all_to_gdb): every frame
        of the inferior is GDB's, unseen."""
        if selected in self._loud:
            return False
        if self._may_be_quiet and not inferior.target.trap_handler_names:
            self._set_arch(inferior.target, pending_frame)
            if inferior.coverage.leaves_all_to_gdb(self.state.unwinder_context(inferior)):
                self._quiet = selected
                return True
        self._loud.add(selected)
        return False

    def _covered_by_pc(self, pending_frame, selected, inferior):
        """Under auto, the common case kept to one register read and one dict look-up: a caller
        frame whose return address GDB's DWARF unwinder covers (True, declined). Else the pc's
        gdb.Value where it was read, or None."""
        target = inferior.target
        callers = inferior.coverage.callers
        level = pending_level(pending_frame)
        if level <= 0 or callers.key != (target.generation, target.trap_handler_names, pending_frame.architecture()):
            return None
        verdicts = callers.verdicts
        if hasattr(pending_frame, "level"):     # GDB 11 and later; before, levels are counted
            self._by_pc = (selected, callers.key[2], callers.pc_register, target.arch.mask, verdicts.backing(), verdicts)
        pc_value = pending_frame.read_register(callers.pc_register)
        try:
            pc = int(pc_value) & target.arch.mask
        except gdb.error:       # optimized out: the slow path says why
            pc = None
        depth, reason = verdicts.backing().get(pc, NOT_COVERED)     # counted by covered_caller where not declined
        if level > depth:
            verdicts.hits += 1
            return self._decline(level, pc, reason)
        return pc_value

    def _caller_covered(self, pending_frame, asked, inferior):
        """Under auto, a caller frame (no frame a signal interrupted) whose return address GDB covers."""
        if asked.level <= 0 or inferior.after_signal:
            return False
        depth, reason = covered_caller(asked.pc, asked.ctx, pending_frame, inferior)
        return asked.level > depth and self._decline(asked.level, asked.pc, reason)

    def _gdb_covers(self, pending_frame, asked, inferior):
        """Under auto, GDB's DWARF unwinder covers the frame's lookup pc (GDB looks a trap handler
        up at pc-1: ours is better there)."""
        if asked.trap:
            return False
        coverage = inferior.coverage
        reason = coverage.gdb_covers(asked.lookup, asked.ctx, pending_frame, call_site=not asked.exact)
        if reason is None:
            return False
        if asked.lookup in coverage.signal_pcs:
            # GDB unwinds the trampoline; the frame it interrupted is
            # offered to us next and must be looked up at its exact pc.
            self._note_interrupted(Frame(level=asked.level, pc=asked.pc, registers=asked.registers,
                                         method="pending", exact_pc=asked.exact), asked.ctx, inferior)
        return self._decline(asked.level, asked.pc, reason)

    def _heuristic_gives(self, asked, inferior):
        """Under auto, GDB's prologue analyser gives the very caller the analysis proves (a verdict
        kept from an earlier frame at this pc)."""
        reason = inferior.coverage.heuristic.get((asked.lookup, asked.exact))
        return reason is not None and self._decline(asked.level, asked.pc, reason)

    def _note_interrupted(self, frame, ctx, inferior):
        outcome, _ = step_frame(frame, ctx)
        if outcome is not None and outcome.signal_frame and outcome.registers:
            arch = ctx.arch
            inferior.after_signal.add((outcome.registers.get(arch.pc), outcome.registers.get(arch.sp)))
            self._by_pc = None       # frames above it are looked up at their exact pc
