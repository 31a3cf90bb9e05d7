"""The frame unwinder GDB's own `bt` uses.

For each frame GDB offers, the engine tries the table sources; when one
recovers the caller, the unwinder hands GDB the frame id (CFA plus function
start) and every register the row restores, plus callee-saved registers
that are unchanged. Otherwise it declines and GDB's own unwinders carry on.
It never raises into GDB: an internal error declines the frame and is kept
for `unwind explain`.
"""

import collections
import traceback

import gdb
from gdb.unwinder import Unwinder

from plugin.arch import reader
from plugin.engine import step_frame
from plugin.model.evidence import Frame

from .claim import Claim

NAME = "unwind-plugin"
HANDED_CACHE_SIZE = 1 << 17      # claimed frames whose registers are remembered until the next resume


class FrameId:
    """GDB 13 has no gdb.unwinder.FrameId: any object whose sp and pc are gdb.Values."""

    def __init__(self, sp, pc):
        self.sp = gdb.Value(sp)
        self.pc = gdb.Value(pc)


class PendingRegisters:
    """The pending frame's registers by DWARF number, read only when a rule needs one."""

    def __init__(self, pending_frame, arch, descriptors=None):
        self._frame = pending_frame
        self._arch = arch
        self._descriptors = descriptors or {}   # name -> gdb.RegisterDescriptor: a faster read than by name
        self.known = {}         # DWARF number -> int, or None when unreadable
        self.raw = {}           # DWARF number -> the gdb.Value read, to hand back unchanged

    def get(self, number, default=None):
        if number not in self.known:
            value = None
            raw = self.raw.get(number)
            if raw is None:
                name = self._arch.registers.get(number)
                if name is not None:
                    try:
                        raw = self._frame.read_register(self._descriptors.get(name, name))
                        if raw.is_optimized_out:
                            raw = None
                        else:
                            self.raw[number] = raw
                    except (gdb.error, ValueError):
                        raw = None
            if raw is not None:
                try:
                    value = int(raw) & self._arch.mask
                except (gdb.error, ValueError):
                    value = None
            self.known[number] = value
        value = self.known[number]
        return default if value is None else value

    def prefill(self, handed):
        """Take the registers this plugin handed GDB for this very frame (its callee's claim):
        they are what GDB would read back, so no read_register is needed. Registers not
        handed are unavailable, as GDB would report them."""
        for number in self._arch.registers:
            raw = handed.get(number)
            if raw is None:
                self.known[number] = None
            else:
                self.raw[number] = raw
                self.known.pop(number, None)

    def same_value(self, number, name):
        """The pending frame's own gdb.Value of a register, for GDB's same-value rule; None if unavailable."""
        raw = self.raw.get(number)
        if raw is None and number not in self.known:
            try:
                raw = self._frame.read_register(self._descriptors.get(name, name))
                if raw.is_optimized_out:
                    raw = None
            except (gdb.error, ValueError):
                raw = None
            if raw is None:
                self.known[number] = None
            else:
                self.raw[number] = raw
        return raw

    def __contains__(self, number):
        return self.get(number) is not None

    def __getitem__(self, number):
        value = self.get(number)
        if value is None:
            raise KeyError(number)
        return value


class PluginUnwinder(Unwinder):
    def __init__(self, state):
        super().__init__(NAME)
        self.state = state
        self.declines = collections.deque(maxlen=256)   # (level, pc, reason) for `unwind explain`
        self._types = {}
        self.claimed = 0

    def __call__(self, pending_frame):
        if self.state.claim == Claim.NONE:
            return None
        inferior = self.state.inferior()
        target = inferior.target
        target.inside_unwinder = True
        try:
            return self._unwind(pending_frame, inferior)
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

    def _unwind(self, pending_frame, inferior):
        state = self.state
        target = inferior.target
        gdb_arch = pending_frame.architecture()      # GDB hands back one object per gdbarch
        if gdb_arch is not target.gdb_arch:
            target.set_arch(gdb_arch.name())
            target.gdb_arch = gdb_arch
            target.descriptors = _descriptors(gdb_arch)
        arch = target.arch
        registers = PendingRegisters(pending_frame, arch, target.descriptors)
        pc = registers.get(arch.pc)
        if pc is None:
            return None
        level = pending_frame.level()
        ctx = state.unwinder_context(inferior)
        exact = is_innermost_physical(level, pc, ctx, inferior.inline_depths)
        if not exact and inferior.after_signal:
            exact = (pc, registers.get(arch.sp)) in inferior.after_signal
        trap = not exact and ctx.trap_handler(pc) is not None
        exact = exact or trap
        if state.claim == Claim.AUTO and not trap:      # GDB looks a trap handler up at pc-1: ours is better
            # The common case, kept cheap: one register read and a few dict look-ups.
            lookup = pc if exact else pc - 1
            reason = inferior.coverage.gdb_covers(lookup, ctx, pending_frame)
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
        handed = inferior.handed.get((pc, sp))
        if handed is not None:
            registers.prefill(handed)
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
            self.declines.append((level, pc, "signal trampoline: left to GDB's sigtramp unwinder"))
            return None
        if trap:
            inferior.after_signal.add((caller[arch.pc], caller.get(arch.sp)))   # LLDB's rule: its caller is exact too
        start = outcome.evidence.entry.get("start", pc) if outcome.evidence else pc
        info = pending_frame.create_unwind_info(FrameId(outcome.evidence.cfa, start))
        names, known, raws = arch.registers, registers.known, registers.raw
        skip = arch.ra if arch.ra != arch.pc else None   # aarch64: the RA column becomes pc
        ruled = _ruled_registers(outcome.evidence)
        given = {}          # DWARF number -> the gdb.Value handed to GDB: the caller's registers
        for number, name in names.items():
            if number == skip:
                continue
            if number in caller:
                value = caller[number]
                raw = raws.get(number)
                if raw is None or known.get(number) != value:
                    raw = self._value(pending_frame, name, value)
            elif number in ruled:
                continue        # undefined, or its rule could not be evaluated: not saved
            else:
                # GDB's rule for a register the row says nothing about: same
                # value as in the callee (dwarf2/frame.c, "unspecified").
                raw = registers.same_value(number, name)
                if raw is None:
                    continue
            info.add_saved_register(name, raw)
            given[number] = raw
        caller_key = (caller.get(arch.pc), caller.get(arch.sp))
        if len(inferior.handed) >= HANDED_CACHE_SIZE:
            inferior.handed.clear()
        inferior.handed[caller_key] = given
        self.claimed += 1
        return info

    def _note_interrupted(self, frame, ctx, inferior):
        outcome, _ = step_frame(frame, ctx)
        if outcome is not None and outcome.signal_frame and outcome.registers:
            arch = ctx.arch
            inferior.after_signal.add((outcome.registers.get(arch.pc), outcome.registers.get(arch.sp)))

    def _value(self, pending_frame, name, value):
        kind = self._types.get(name)
        if kind is None:
            kind = self._types[name] = pending_frame.read_register(name).type
        return gdb.Value(value).cast(kind)


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


def inline_depth(pc, cache):
    """How many inlined-function blocks enclose pc (0 without debug information); cached per pc."""
    depth = cache.get(pc)
    if depth is not None:
        return depth
    try:
        block = gdb.block_for_pc(pc)
    except (RuntimeError, gdb.error):
        block = None
    functions = 0
    while block is not None:
        if block.function is not None:
            functions += 1
        block = block.superblock
    depth = cache[pc] = max(functions - 1, 0)
    return depth


def is_innermost_physical(level, pc, ctx, depths):
    """Is the pending frame at GDB level `level` the thread's innermost physical frame?

    GDB numbers inline frames too: stopped in code inlined into a function,
    levels 0..k-1 are inline frames and the function's own frame is level
    k, whose pc is the stop pc, not a return address. No frame may be
    asked here (GDB is computing the newest frame's id), so the answer
    comes from the blocks at pc: the innermost physical frame has at most
    inline_depth(pc) inline frames below it, while a caller has its callee
    and its own inline frames at pc-1 below it, so level > inline_depth(pc-1).
    Where both could hold (pc starts an inlined block), a return address
    follows a call instruction and a stop pc at a block's start normally
    does not.
    """
    if level == 0:
        return True
    if level > inline_depth(pc, depths):
        return False
    if level <= inline_depth(pc - 1, depths):
        return True
    try:
        return ctx.arch.call_before(reader(ctx.read_memory), pc) is None
    except Exception:           # unreadable code: the caller reading is the safe one
        return False
