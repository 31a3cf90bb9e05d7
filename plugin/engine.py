"""The step loop: which source to try, whether to believe it, when to stop.

Strategies only answer "here is the caller" or "not me, because...". The
engine orders them, checks every answer (the CFA must grow, the return
address must be code), falls back to the next source when a check fails and
records why, and ends the walk with a named stop reason.

The fallback sources (analysis reads the code, frame-pointer and scan the
stack) answer for frames no table covers; once a table that covers the frame has
failed a check, the stack is damaged there and the walk stops with the
table's reason rather than guessing past it (their attempts say "skipped").

Every failure carries a FailureKind (plugin.model.outcome); the stop reason
(plugin.model.stops) is decided from those kinds, never from the sentences.
"""

import bisect

from plugin.cache import BoundedCache
from plugin.errors import MemoryReadError
from plugin.model.evidence import Attempt, Backtrace, Frame
from plugin.model.outcome import AttemptStatus, FailureKind
from plugin.model.stops import StopReason
from plugin.modules import ModuleMap, on_disk
from plugin.modules import pe as pe_modules
from plugin.modules.module import ModuleFormat
from plugin import checks, settings
from plugin.arch import reader
from plugin.settings import DEFAULT_MAX_FRAMES, DEFAULT_SCAN_WORDS, source_names
from plugin.strategies import planted
from plugin.strategies import sigframe
from plugin.strategies.registry import STRATEGIES

# Sources that read the code or the stack itself rather than a table. They
# answer only for frames no table covers (see step_frame).
FALLBACK_SOURCES = source_names(settings.FALLBACK_KINDS)
DEFAULT_SOURCES = source_names(available=STRATEGIES)


def parse_sources(text):
    """A user's comma-separated source list, checked against the sources built here."""
    return settings.parse_sources(text, DEFAULT_SOURCES)

# The stop reason a failure kind ends the walk with when every source that
# answered for the frame failed that way (see _stop_for). Kinds not listed
# say nothing certain about the stack itself: no-unwind-info. Among them
# NOT_STACK_MEMORY: a frame pointer into read-only or executable memory is
# what code that keeps no frame pointer may leave in the register, so it
# shows that the chain cannot be followed, not that the stack is damaged
# (like a frame pointer of 0), and it is no bad return address.
STOP_FOR_KIND = {
    FailureKind.UNREADABLE_MEMORY: StopReason.UNREADABLE_MEMORY,
    FailureKind.MISALIGNED: StopReason.MISALIGNED_STACK,
    FailureKind.CFA_NOT_INCREASING: StopReason.CFA_NOT_INCREASING,
    FailureKind.RETURN_ADDRESS_NOT_CODE: StopReason.RETURN_ADDRESS_NOT_CODE,
}


class UnwindContext:
    """What strategies may use: the target, its modules, and the lookup-pc rule."""

    def __init__(self, target, modules=None, sources=DEFAULT_SOURCES, scan_words=None):
        self.target = target
        self.arch = target.arch
        self.modules = modules or ModuleMap(target)
        self.sources = tuple(sources)
        self._scan_words = scan_words
        self._mappings = None
        self._all_mappings = None
        self.stack_pointer = None       # the walked thread's sp: its stack mapping is no code
        # What the context remembers (plugin.cache), each with its bound and hit counts. Until
        # the process runs (forget_process_state):
        self.symbols = BoundedCache("symbols", 1 << 16)             # address -> (name, start) or None
        self.code_checks = BoundedCache("code checks", 1 << 16)     # (address, stack_pointer) -> is_code
        self.after_call = BoundedCache("after-call checks", 1 << 16)    # address -> follows_call
        # For one module generation (they rest on the modules' tables, symbols and code):
        self.signal_trampolines = BoundedCache("signal trampolines", 1 << 14)  # sigframe.recognise
        self.prologue_models = BoundedCache("prologue models", 1 << 16)   # heuristic: (start, pc) -> model

    @property
    def scan_words(self):
        """Stack words the scan source reads: as given, else the adapter's setting on its target."""
        return self._scan_words or getattr(self.target, "scan_words", None) or DEFAULT_SCAN_WORDS

    def forget_process_state(self):
        """Drop what the process may change while it runs: mappings (stacks, JIT code), symbols."""
        self._mappings = None
        self._all_mappings = None
        self.symbols.clear()
        self.code_checks.clear()
        self.after_call.clear()

    def read_memory(self, address, size):
        return self.target.read_memory(address, size)

    def lookup_pc(self, frame):
        """Caller frames are looked up at pc-1: a return address points after the call."""
        return frame.pc if frame.exact_pc else frame.pc - 1

    def trap_handler(self, pc):
        """The name of the trap handler (`trap-handler-names`) holding pc, or None.

        Such a function is entered by an address planted on the stack, not by
        a call, so a frame in it, and the frame it returns to, are looked up
        at their exact pc (as LLDB does with target.trap-handler-names).
        """
        names = getattr(self.target, "trap_handler_names", None)
        if not names:
            return None
        module = self.modules.find(pc)
        for start, end, name in on_disk.functions_named(module, tuple(names)) if module else ():
            if start <= pc < end:
                return name
        found = self.symbol(pc)        # no file, or a function its symbol tables do not name
        return found[0] if found is not None and found[0] in names else None

    def follows_call(self, address):
        """Can address be a return address: right after a call instruction, or the start of a
        signal trampoline (the kernel plants those)? Cached until the process runs."""
        return self.after_call.lookup(address, self._follows_call, address)

    def _follows_call(self, address):
        return self.arch.call_before(reader(self.read_memory), address) is not None \
            or sigframe.recognise(self, address) is not None

    def is_code(self, address):
        # in_a_stack depends on the walk's sp
        return self.code_checks.lookup((address, self.stack_pointer), self._is_code, address)

    def _is_code(self, address):
        module = self.modules.find(address)
        if module is not None:
            return module.is_executable(address)
        if not getattr(self.target, "mappings_known", True):
            # A remote stub without /proc (qemu's gdbstub) cannot say what is
            # executable outside the modules, e.g. qemu's signal trampoline
            # page: readable memory is the most that can be checked there.
            try:
                self.target.read_memory(address, 1)
                return True
            except MemoryReadError:
                return False
        if self._mappings is None:
            self._mappings = [m for m in self.target.mappings() if m.executable]
        return any(m.contains(address) for m in self._mappings) and not self.in_a_stack(address)

    def in_a_stack(self, address):
        """Is address in a thread's stack: the kernel's "[stack]" or the mapping the walk's sp is in?

        A stack is never code, even when it is executable (any object file
        without a .note.GNU-stack section makes every stack so): a stack
        address read as a return address is a wrong row, not a frame.
        """
        mapping = self.mapping_at(address)
        if mapping is None:
            return False
        if (mapping.name or "").startswith("[stack"):
            return True
        return self.stack_pointer is not None and mapping.contains(self.stack_pointer)

    def _load_mappings(self):
        if self._all_mappings is None:
            self._all_mappings = sorted(self.target.mappings(), key=lambda m: m.start)
            self._mapping_starts = [m.start for m in self._all_mappings]
        return self._all_mappings

    def knows_mappings(self):
        """Can the debugger list the process's mappings (not on every remote target)?"""
        return getattr(self.target, "mappings_known", True) and bool(self._load_mappings())

    def mapping_at(self, address):
        """The process mapping holding address, or None (also when mappings are not known)."""
        mappings = self._load_mappings()
        i = bisect.bisect_right(self._mapping_starts, address) - 1
        if i >= 0 and mappings[i].contains(address):
            return mappings[i]
        return None

    def mapping_above(self, address):
        """The first process mapping that starts above address, or None."""
        mappings = self._load_mappings()
        i = bisect.bisect_right(self._mapping_starts, address)
        return mappings[i] if i < len(mappings) else None

    def symbol(self, address):
        """(name, start) of the function holding address, or None; cached for this walk."""
        return self.symbols.lookup(address, self._symbol, address)

    def _symbol(self, address):
        try:
            return self.target.symbol(address)
        except Exception:       # symbols only help; a failed lookup is "unknown"
            return None

    def caches(self):
        """The context's caches (plugin.cache), for their hit counts."""
        return (self.symbols, self.code_checks, self.after_call, self.signal_trampolines, self.prologue_models)


def step_frame(frame, ctx, previous_cfa=None):
    """Try each source for frame's caller.

    Returns (outcome, attempts): outcome is the accepted recovered Outcome
    or None; attempts lists every source tried before it and why it was not
    taken.
    """
    attempts = []
    arch = ctx.arch
    sp = frame.registers.get(arch.sp)
    covered_by = None       # a table source that had a row for this pc but whose answer failed
    for source in _sources_for(frame, ctx):
        strategy = STRATEGIES.get(source)
        if strategy is None:
            continue
        if covered_by is not None and source in FALLBACK_SOURCES:
            # A table describes this frame, and following it hit damage (a bad
            # return address, a CFA that does not grow, unreadable memory).
            # Guessing past that would report invented frames as real ones, so
            # the walk stops here with the table's reason instead.
            attempts.append(Attempt(source, AttemptStatus.SKIPPED,
                                    "%s covers this pc and its answer failed a check: "
                                    "the stack is damaged here, so it is not guessed past" % covered_by))
            continue
        try:
            outcome = strategy(frame, ctx)
        except Exception as exc:       # a strategy bug must not end the walk: record it
            kind = FailureKind.UNREADABLE_MEMORY if isinstance(exc, MemoryReadError) else FailureKind.INTERNAL_ERROR
            attempts.append(Attempt(source, AttemptStatus.FAILED,
                                    "internal error: %s: %s" % (type(exc).__name__, exc), kind))
            continue
        if outcome.status != AttemptStatus.RECOVERED:
            attempts.append(Attempt(source, outcome.status, outcome.reason, outcome.kind))
            if _had_a_row(source, outcome):
                covered_by = source
            continue
        if outcome.outermost:
            return outcome, attempts
        problem = checks.implausible(outcome, frame, ctx, sp, previous_cfa)
        if problem:
            kind, why = problem
            attempts.append(Attempt(source, AttemptStatus.REJECTED, why, kind))
            if _had_a_row(source, outcome):
                covered_by = source
            continue
        return outcome, attempts
    return None, attempts


def _sources_for(frame, ctx):
    """ctx.sources, except that a source declared to go before another in a module
    format (settings.Source.goes_before: `compact` before `cfi` in Mach-O, where
    Apple's own unwinders consult __unwind_info first and its DWARF-mode opcodes
    lead to the __eh_frame FDE themselves; `orc` before `cfi` in the kernel, whose
    only tables are ORC) is moved just before it there. Other modules keep the
    configured order, where `compact` and `orc` (not applicable to them) come after
    the other table sources. The frame's module is looked up once."""
    sources = ctx.sources
    module_format = None
    for name, wanted, before in settings.GOES_BEFORE:
        if name in sources and before in sources and sources.index(name) > sources.index(before):
            if module_format is None:
                module = ctx.modules.find(ctx.lookup_pc(frame))
                module_format = module.format if module is not None else False
            if module_format == wanted:
                rest = [s for s in sources if s != name]
                at = rest.index(before)
                sources = tuple(rest[:at] + [name] + rest[at:])
    return sources


def _had_a_row(source, outcome):
    """Did a table source find an entry for the pc (as opposed to having no usable table)?"""
    return source not in FALLBACK_SOURCES and getattr(outcome.evidence, "rule", None) is not None


def _stop_for(attempts):
    """The stop reason for a frame no source recovered, from the kinds of failure the sources met.

    Any unreadable memory (even a table that could not be loaded) ends the
    walk as unreadable-memory; otherwise, when every source that answered
    (failed or rejected) failed the same way, that way names the stop.
    """
    tried = [a for a in attempts if a.outcome != AttemptStatus.SKIPPED]
    if any(a.kind == FailureKind.UNREADABLE_MEMORY for a in tried):
        return StopReason.UNREADABLE_MEMORY
    answered = [a for a in tried if a.outcome in (AttemptStatus.REJECTED, AttemptStatus.FAILED)]
    reasons = {STOP_FOR_KIND.get(a.kind) for a in answered}
    if len(reasons) == 1 and None not in reasons:
        return reasons.pop()
    return StopReason.NO_UNWIND_INFO


def unwind(target, registers, sources=DEFAULT_SOURCES, max_frames=DEFAULT_MAX_FRAMES,
           modules=None, symbolize=True, exact_pc=True, first_level=0, scan_words=None, step=None,
           until=None):
    """Walk the stack from `registers`; returns a Backtrace.

    The walk starts at the frame the registers belong to (the innermost one
    unless first_level says otherwise); exact_pc says whether its pc is the
    instruction itself rather than a return address. `step` replaces
    step_frame (same arguments and answer): an adapter's fast path. until:
    called with each frame as the walk reaches it (an adapter numbers it
    there); when it returns True the walk ends there with the stop reason
    `limit`.
    """
    ctx = UnwindContext(target, modules, sources, scan_words)
    arch = ctx.arch
    ctx.stack_pointer = registers.get(arch.sp)
    frame = Frame(level=first_level, pc=registers.get(arch.pc, 0), registers=dict(registers),
                  method="context", exact_pc=exact_pc)
    frames = [frame]
    seen = {(frame.pc, registers.get(arch.sp))}
    previous_cfa = None
    stop, detail, last_attempts = None, "", []
    if until is not None and until(frame):
        stop = StopReason.LIMIT
    while stop is None:
        if len(frames) >= max_frames:
            stop, detail = StopReason.DEPTH_LIMIT, "stopped after %d frames" % max_frames
            break
        ends_stack = planted.outermost(frame, ctx)
        if ends_stack is not None:      # a runtime's planted return address: not after a call, so exact
            frame.exact_pc = True
            stop, detail = StopReason.OUTERMOST, ends_stack
            break
        switched = planted.stack_switch(frame, ctx)
        if switched is not None:
            stop, detail = StopReason.STACK_SWITCH, switched
            break
        outcome, attempts = (step or step_frame)(frame, ctx, previous_cfa)
        if outcome is None:
            stop, last_attempts = _stop_for(attempts), attempts
            detail = "; ".join("%s: %s" % (a.source, a.reason) for a in attempts) or "no sources enabled"
            break
        frame.signal_frame = outcome.signal_frame
        if outcome.evidence is not None:
            frame.cfa = outcome.evidence.cfa
        if outcome.outermost:
            stop, detail = StopReason.OUTERMOST, outcome.reason
            break
        caller_regs = outcome.registers
        caller_pc = caller_regs.get(arch.pc, 0)
        if caller_pc == 0:
            stop, detail = StopReason.PC_ZERO, "%s gives return address 0" % outcome.source
            break
        key = (caller_pc, caller_regs.get(arch.sp))
        if key in seen:
            stop, detail = StopReason.REPEATED_FRAME, "pc 0x%x with sp 0x%x was already seen" % key
            break
        seen.add(key)
        # Across a signal frame the stack may switch (sigaltstack): the CFA
        # need not grow there; the repeated-frame check still guards loops.
        previous_cfa = None if frame.signal_frame else frame.cfa
        caller = Frame(level=first_level + len(frames), pc=caller_pc, registers=caller_regs, method=outcome.source,
                       evidence=outcome.evidence, attempts=attempts,
                       exact_pc=outcome.signal_frame or checks.after_trap_handler(frame, caller_pc, outcome, ctx))
        frames.append(caller)
        frame = caller
        if until is not None and until(frame):
            stop = StopReason.LIMIT
    if symbolize:
        name_frames(frames, ctx)
    return Backtrace(frames, stop, detail, last_attempts)


def name_frames(frames, ctx):
    """Fill function and module names (lookup at pc-1 for return addresses).

    A signal trampoline is entered by "returning" to its first instruction,
    so it is named at its pc itself. Code outside every module (JIT code)
    has module None and is named after its mapping:
    "<jit code in anonymous mapping 0x7f...000>" (the mapping's start), or
    "<jit code in NAME 0x...>" when the mapping has a name.
    """
    for frame in frames:
        pc = frame.pc if frame.signal_frame else ctx.lookup_pc(frame)
        module = ctx.modules.find(pc)
        frame.module = module.name if module else None
        found = ctx.symbol(pc)
        if not found and module is not None and module.format == ModuleFormat.PE:
            found = pe_modules.function_at(ctx.target, module, pc)
        if found:
            frame.function, frame.function_start = found
        elif module is None:
            frame.function = jit_name(ctx, pc)


def jit_name(ctx, pc):
    """"<jit code in anonymous mapping 0x...>" for executable memory outside every module, else None."""
    mapping = ctx.mapping_at(pc)
    if mapping is None or not mapping.executable:
        return None
    return "<jit code in %s 0x%x>" % (mapping.name or "anonymous mapping", mapping.start)
