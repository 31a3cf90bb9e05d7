"""The step loop: which source to try, whether to believe it, when to stop.

Strategies only answer "here is the caller" or "not me, because...". The
engine orders them, checks every answer (the CFA must grow, the return
address must be code), falls back to the next source when a check fails and
records why, and ends the walk with a named stop reason.
"""

from .evidence import Attempt, Backtrace, Frame
from .modules import ModuleMap
from .strategies import FAILED, NOT_APPLICABLE, RECOVERED
from .strategies import cfi as cfi_strategy

STRATEGIES = {
    "cfi": cfi_strategy.step,
}
DEFAULT_SOURCES = ("cfi",)
DEFAULT_MAX_FRAMES = 20000

# Stop reasons (the names scripts see in JSON).
OUTERMOST = "outermost"                     # a table marks the frame as the last one
PC_ZERO = "pc-zero"                         # return address 0: the convention for "no caller"
CFA_NOT_INCREASING = "cfa-not-increasing"
REPEATED_FRAME = "repeated-frame"
UNREADABLE_MEMORY = "unreadable-memory"
DEPTH_LIMIT = "depth-limit"
NO_UNWIND_INFO = "no-unwind-info"           # nothing could recover the frame
NOT_CODE = "return-address-not-code"

STOP_WORDS = {
    OUTERMOST: "outermost frame (the unwind table marks it so)",
    PC_ZERO: "return address is 0: outermost frame",
    CFA_NOT_INCREASING: "the caller's CFA does not increase",
    REPEATED_FRAME: "a frame repeats: the stack loops",
    UNREADABLE_MEMORY: "memory needed to unwind cannot be read",
    DEPTH_LIMIT: "depth limit reached",
    NO_UNWIND_INFO: "no source could recover the caller",
    NOT_CODE: "the recovered return address is not in executable memory",
}


def parse_sources(text, available=None):
    """Validate a comma-separated source list; returns a tuple or raises ValueError."""
    available = tuple(available or STRATEGIES)
    names = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    if not names:
        raise ValueError("no sources given; choose from: %s" % ", ".join(available))
    for name in names:
        if name not in available:
            raise ValueError("unknown source %r; choose from: %s" % (name, ", ".join(available)))
    return tuple(dict.fromkeys(names))


class UnwindContext:
    """What strategies may use: the target, its modules, and the lookup-pc rule."""

    def __init__(self, target, modules=None, sources=DEFAULT_SOURCES):
        self.target = target
        self.arch = target.arch
        self.modules = modules or ModuleMap(target)
        self.sources = tuple(sources)
        self._mappings = None

    def read_memory(self, address, size):
        return self.target.read_memory(address, size)

    def lookup_pc(self, frame):
        """Caller frames are looked up at pc-1: a return address points after the call."""
        return frame.pc if frame.exact_pc else frame.pc - 1

    def is_code(self, address):
        module = self.modules.find(address)
        if module is not None:
            return module.is_executable(address)
        if self._mappings is None:
            self._mappings = [m for m in self.target.mappings() if m.executable]
        return any(m.contains(address) for m in self._mappings)


def step_frame(frame, ctx, previous_cfa=None):
    """Try each source for frame's caller.

    Returns (outcome, attempts): outcome is the accepted RECOVERED Outcome
    or None; attempts lists every source tried before it and why it was not
    taken.
    """
    attempts = []
    arch = ctx.arch
    sp = frame.registers.get(arch.sp)
    for source in ctx.sources:
        strategy = STRATEGIES.get(source)
        if strategy is None:
            continue
        try:
            outcome = strategy(frame, ctx)
        except Exception as exc:       # a strategy bug must not end the walk: record it
            attempts.append(Attempt(source, FAILED, "internal error: %s: %s" % (type(exc).__name__, exc)))
            continue
        if outcome.status != RECOVERED:
            attempts.append(Attempt(source, outcome.status, outcome.reason))
            continue
        if outcome.outermost:
            return outcome, attempts
        problem = _implausible(outcome, frame, ctx, sp, previous_cfa)
        if problem:
            attempts.append(Attempt(source, "rejected", problem))
            continue
        return outcome, attempts
    return None, attempts


def _implausible(outcome, frame, ctx, sp, previous_cfa):
    arch = ctx.arch
    cfa = outcome.evidence.cfa if outcome.evidence else None
    caller_pc = outcome.registers.get(arch.pc)
    if cfa is not None and sp is not None:
        may_equal = frame.exact_pc      # a leaf or interrupted frame may have CFA == sp
        if cfa < sp or (cfa == sp and not may_equal):
            return "CFA 0x%x is not above the stack pointer 0x%x" % (cfa, sp)
    if cfa is not None and previous_cfa is not None and cfa <= previous_cfa and not frame.signal_frame:
        return "CFA 0x%x does not increase (callee's CFA 0x%x)" % (cfa, previous_cfa)
    if caller_pc not in (None, 0) and not ctx.is_code(caller_pc):
        return "return address 0x%x is not in executable memory" % caller_pc
    return None


def _stop_for(attempts):
    if any("cannot read" in a.reason for a in attempts):
        return UNREADABLE_MEMORY
    rejected = [a for a in attempts if a.outcome == "rejected"]
    if rejected and all("does not increase" in a.reason or "not above" in a.reason for a in rejected):
        return CFA_NOT_INCREASING
    if rejected and all("executable" in a.reason for a in rejected):
        return NOT_CODE
    return NO_UNWIND_INFO


def unwind(target, registers, sources=DEFAULT_SOURCES, max_frames=DEFAULT_MAX_FRAMES,
           modules=None, symbolize=True, exact_pc=True, first_level=0):
    """Walk the stack from `registers`; returns a Backtrace.

    The walk starts at the frame the registers belong to (the innermost one
    unless first_level says otherwise); exact_pc says whether its pc is the
    instruction itself rather than a return address.
    """
    ctx = UnwindContext(target, modules, sources)
    arch = ctx.arch
    frame = Frame(level=first_level, pc=registers.get(arch.pc, 0), registers=dict(registers),
                  method="context", exact_pc=exact_pc)
    frames = [frame]
    seen = {(frame.pc, registers.get(arch.sp))}
    previous_cfa = None
    stop, detail, last_attempts = None, "", []
    while stop is None:
        if len(frames) >= max_frames:
            stop, detail = DEPTH_LIMIT, "stopped after %d frames" % max_frames
            break
        outcome, attempts = step_frame(frame, ctx, previous_cfa)
        if outcome is None:
            stop, last_attempts = _stop_for(attempts), attempts
            detail = "; ".join("%s: %s" % (a.source, a.reason) for a in attempts) or "no sources enabled"
            break
        frame.signal_frame = outcome.signal_frame
        if outcome.evidence is not None:
            frame.cfa = outcome.evidence.cfa
        if outcome.outermost:
            stop, detail = OUTERMOST, outcome.reason
            break
        caller_regs = outcome.registers
        caller_pc = caller_regs.get(arch.pc, 0)
        if caller_pc == 0:
            stop, detail = PC_ZERO, "%s gives return address 0" % outcome.source
            break
        key = (caller_pc, caller_regs.get(arch.sp))
        if key in seen:
            stop, detail = REPEATED_FRAME, "pc 0x%x with sp 0x%x was already seen" % key
            break
        seen.add(key)
        previous_cfa = frame.cfa
        caller = Frame(level=first_level + len(frames), pc=caller_pc, registers=caller_regs, method=outcome.source,
                       evidence=outcome.evidence, attempts=attempts,
                       exact_pc=outcome.signal_frame)
        frames.append(caller)
        frame = caller
    if symbolize:
        name_frames(frames, ctx)
    return Backtrace(frames, stop, detail, last_attempts)


def name_frames(frames, ctx):
    """Fill function and module names (lookup at pc-1 for return addresses).

    A signal trampoline is entered by "returning" to its first instruction,
    so it is named at its pc itself.
    """
    for frame in frames:
        pc = frame.pc if frame.signal_frame else ctx.lookup_pc(frame)
        module = ctx.modules.find(pc)
        frame.module = module.name if module else None
        try:
            found = ctx.target.symbol(pc)
        except Exception:           # symbol lookup is cosmetic; never let it end a backtrace
            found = None
        if found:
            frame.function, frame.function_start = found
