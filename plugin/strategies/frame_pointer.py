"""The `frame-pointer` source: follow the chain of saved frame pointers.

Code built with frame pointers keeps a *frame record* on the stack and a
register pointing at it:

    x86_64  push rbp; mov rbp, rsp     [rbp] = caller's rbp, [rbp+8] = return address
    i386    push ebp; mov ebp, esp     [ebp] = caller's ebp, [ebp+4] = return address
    aarch64 stp x29, x30, [sp, #-N]!; mov x29, sp
                                       [x29] = caller's x29, [x29+8] = return address (x30)

so the caller's frame is: CFA = fp + 2 words, fp = [CFA - 2 words],
return address = [CFA - 1 word]. That is written as a plugin.model.rules.Row and
evaluated by row_step.step_with_row, like every table source, so the
evidence (row, reads, CFA) looks the same.

The chain is only as good as the frame pointer, so before using it the
strategy checks that it is not 0, is aligned, lies at or above the stack
pointer (which, one frame up, means above the previous frame pointer), and
points into readable stack memory; and after, that the return address follows
a call instruction. The engine then checks the return address is code and
the CFA grows.

At the first instruction of a function the record does not exist yet. For
the innermost frame (and a frame interrupted by a signal), whose pc is the
exact instruction, the code bytes at pc and the function start (from
symbols, where known) tell where the return address is:

    function entry (x86: `push rbp` not executed)  return address at [sp]
    x86 after `push rbp`, before `mov rbp, rsp`    saved rbp at [sp], return address at [sp+8]
    x86 at `ret` (after `pop rbp` / `leave`)       return address at [sp]
    aarch64 at entry or at `ret`                   return address in x30, CFA = sp
    aarch64 after `stp x29, x30, [sp, #-N]!`       record at [sp], CFA = sp + N

A frame-pointer step knows only pc, sp and the frame pointer of the caller;
other callee-saved registers may have been saved anywhere in the frame, so
they are left unknown rather than guessed.
"""

from plugin.arch import CLONE_FUNCTIONS, FrameEdge, reader
from plugin.model.evidence import StepEvidence
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.strategies import planted, process_entry, sigframe
from plugin.strategies.row_step import step_with_row

SOURCE = "frame-pointer"

# How far into a function to look for the instruction that sets up its frame
# pointer (compilers may "shrink-wrap" it behind an early-exit test). The
# look never goes past the frame's own pc: the set-up must have run by then,
# and bytes past it may belong to the next function.
PROLOGUE_WINDOW = 256
TRAMPOLINE_WINDOW = 4096    # bytes between sp and a frame record searched for a signal trampoline's address

# -- helpers shared with the scan source -------------------------------------------

def function_of(frame, ctx):
    """(name, start) of the function the frame is in, or None."""
    return ctx.symbol(ctx.lookup_pc(frame))


def stack_edge(frame, ctx, source):
    """What every source that reads code or the stack answers alike, else None: a signal
    trampoline's frame (unwound by the kernel's signal frame), a new thread's first frame, or
    the process's first frame (plugin.strategies.process_entry)."""
    trampoline = sigframe.at_trampoline(frame, ctx)
    if trampoline is not None:
        return sigframe.step(frame, ctx, source, trampoline)
    return outermost_child_of_clone(frame, ctx, source) or process_entry.outermost(frame, ctx, source)


def outermost_child_of_clone(frame, ctx, source):
    """An outermost Outcome when the registers show a new thread's first instant, else None.

    Only the child side of clone/clone3 is outermost: on the parent side
    [sp] is the return address into the wrapper's caller, as everywhere
    else. The symbol only says which system call the instruction before pc
    made; the decision rests on the code read there and the result register
    (plugin.arch: child_of_clone).
    """
    if not frame.exact_pc:
        return None
    found = function_of(frame, ctx)
    if found is None or found[0] not in CLONE_FUNCTIONS:
        return None
    why = ctx.arch.child_of_clone(reader(ctx.read_memory), frame.pc, frame.registers)
    if why is None:
        return None
    reason = "child side of %s: %s" % (found[0], why)
    evidence = StepEvidence(source=source, found_by="%s: child side of %s" % (source, found[0]),
                            lookup_pc=frame.pc, module=_module_name(ctx, frame),
                            section="registers", section_address=found[1],
                            entry={"function": found[0], "function_start": found[1]})
    evidence.notes.append(reason)
    return Outcome(AttemptStatus.RECOVERED, source, reason, evidence=evidence, outermost=True)


def keep_only_known(outcome, arch, what):
    """Drop every caller register but pc, sp and the frame pointer: nothing else is known."""
    if outcome.status != AttemptStatus.RECOVERED or outcome.registers is None:
        return outcome
    known = (arch.pc, arch.sp, arch.fp)
    dropped = sorted(n for n in outcome.registers if n not in known)
    outcome.registers = {n: v for n, v in outcome.registers.items() if n in known}
    evidence = outcome.evidence
    evidence.caller_registers = outcome.registers
    if dropped:
        evidence.notes.append("%s recovers only %s; %s are unknown in the caller" % (
            what, ", ".join(arch.name_of(n) for n in known), ", ".join(arch.name_of(n) for n in dropped)))
    return outcome


def _module_name(ctx, frame):
    module = ctx.modules.find(ctx.lookup_pc(frame))
    return module.name if module else None


# -- rows -------------------------------------------------------------------------

def chain_row(arch, pc, cfa_offset=None):
    """CFA = fp + 2 words; fp = [CFA - 2 words]; return address = [CFA - 1 word].

    cfa_offset (a ChainLayout's) moves the CFA above the record: fp = [CFA - cfa_offset],
    return address = [CFA - cfa_offset + 1 word].
    """
    w = arch.address_size
    cfa_offset = cfa_offset or 2 * w
    return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=arch.fp, offset=cfa_offset),
               registers={arch.fp: Rule(RuleKind.OFFSET, offset=-cfa_offset),
                          arch.ra: Rule(RuleKind.OFFSET, offset=-cfa_offset + w)},
               ra_signed=arch.pointer_auth)


def _slots_row(arch, pc, slots):
    """A row from an Edge's Slots: CFA = sp + cfa, return address at [CFA + ra], fp saved or unchanged."""
    registers = {arch.ra: Rule(RuleKind.OFFSET, offset=slots.ra),
                 arch.fp: Rule(RuleKind.SAME) if slots.fp is None else Rule(RuleKind.OFFSET, offset=slots.fp)}
    return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=slots.cfa),
               registers=registers, ra_signed=arch.pointer_auth)


def _record_at_sp_row(arch, pc, size):
    """A frame record just stored at sp, `size` bytes below the CFA."""
    w = arch.address_size
    return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=size),
               registers={arch.fp: Rule(RuleKind.OFFSET, offset=-size),
                          arch.ra: Rule(RuleKind.OFFSET, offset=-size + w)},
               ra_signed=arch.pointer_auth)


# -- the first and last instructions of a function ----------------------------------

def prologue_row(frame, ctx, function):
    """(row, kind, description) when the exact pc is where the frame record is not (yet/any more) set up.

    At an entry or a return only the return address is on the stack (x86) or
    in the link register (aarch64, where it may be signed): the arch's
    entry_row, with the frame pointer unchanged.
    """
    arch = ctx.arch
    start = function[1] if function else None
    if frame.exact_pc:
        edge = arch.frame_edge(reader(ctx.read_memory), frame.pc, start)
    else:   # a return address is after a call: the prologue has run, unless the call is Go's stack growth
        edge = arch.stack_growth_edge(reader(ctx.read_memory), frame.pc, start, exact=False)
    if edge is None:
        return None
    if edge.slots is not None:
        row = _slots_row(arch, frame.pc, edge.slots)
    elif edge.kind == FrameEdge.AFTER_PUSH:
        row = _record_at_sp_row(arch, frame.pc, edge.record_size)
    else:
        row = arch.entry_row(frame.pc, unchanged=(arch.fp,), ra_signed=arch.pointer_auth)
        if edge.ra_in is not None:
            row = Row(address=row.address, cfa=row.cfa, ra_signed=row.ra_signed,
                      registers={**row.registers, arch.ra: Rule(RuleKind.REGISTER, register=edge.ra_in)})
    return row, edge.kind, edge.why


def bad_call_target_row(frame, ctx):
    """(row, kind, description) when the exact pc is not code: a call through a null or bad pointer.

    Nothing ran at such a pc, so the frame is the instant after the call: the
    return address the call left is at [sp] (x86) or in the link register
    (aarch64), as at a function's entry. The return address must still
    follow a call (checked after the step), which a jump or return to a
    wild address does not leave.
    """
    if not frame.exact_pc or ctx.is_code(frame.pc):
        return None
    row = ctx.arch.entry_row(frame.pc, unchanged=(ctx.arch.fp,), ra_signed=ctx.arch.pointer_auth)
    if row is None:
        return None
    arch = ctx.arch
    where = "[%s]" % arch.name_of(arch.sp) if row.cfa.offset else arch.name_of(arch.ra)
    why = ("pc 0x%x is not in executable memory: a call through a null or bad function pointer; nothing ran "
           "there, so the return address the call left is in %s" % (frame.pc, where))
    return row, FrameEdge.BAD_CALL_TARGET, why


def sets_up_frame_pointer(ctx, start, pc):
    """Does the code from the function start up to pc set up a frame pointer? True, False or None.

    None means it cannot tell: no symbol, a pc outside the function, or unreadable code.
    """
    if start is None or not start < pc <= start + (1 << 20):
        return None
    code = reader(ctx.read_memory)(start, min(pc - start, PROLOGUE_WINDOW))
    if code is None:
        return None
    return ctx.arch.sets_up_frame_pointer(code)


def chain_layout(ctx, start, pc):
    """The arch's ChainLayout for the code from the function start up to pc, or None (the usual record)."""
    if start is None or not start < pc <= start + (1 << 20):
        return None
    code = reader(ctx.read_memory)(start, min(pc - start, PROLOGUE_WINDOW))
    return None if code is None else ctx.arch.chain_layout(code)


def may_save_frame_pointer(ctx, start, pc):
    """Could the code from the function start up to pc have saved (and so reused) the frame pointer?

    True (or unknown) is the cautious answer elsewhere; the arch tells from
    the prologue's code (x86: a `push rbp`).
    """
    if start is None or not start < pc <= start + (1 << 20):
        return True
    return ctx.arch.may_save_frame_pointer(lambda: reader(ctx.read_memory)(start, min(pc - start, PROLOGUE_WINDOW)))


# -- checks on the frame pointer --------------------------------------------------

def frame_pointer_problem(fp, sp, ctx, below_sp=0):
    """(FailureKind, why) when the frame pointer cannot be followed, or None."""
    arch = ctx.arch
    name = arch.name_of(arch.fp)
    if fp is None:
        return FailureKind.UNKNOWN_REGISTER, "the value of %s is unknown" % name
    if fp == 0:
        return (FailureKind.NO_FRAME_POINTER,
                "%s is 0: there is no frame-pointer chain here (it ends, or this code does not keep one)" % name)
    if fp % arch.address_size:
        return (FailureKind.MISALIGNED,
                "frame pointer %s=0x%x is not aligned to %d bytes" % (name, fp, arch.address_size))
    if ctx.knows_mappings():
        mapping = ctx.mapping_at(fp)
        if mapping is None or not mapping.readable:
            return (FailureKind.UNREADABLE_MEMORY,
                    "cannot read the frame record at %s=0x%x: no readable mapping holds it" % (name, fp))
        if not mapping.writable or (mapping.executable and not ctx.in_a_stack(fp)):     # stacks may be executable
            return (FailureKind.NOT_STACK_MEMORY, "frame pointer %s=0x%x points into %s, which is not stack memory"
                    % (name, fp, mapping.name or "a read-only or executable mapping"))
    if sp is not None and fp + below_sp < sp:
        return (FailureKind.CFA_NOT_INCREASING,
                "frame pointer %s=0x%x is not above the stack pointer 0x%x: it belongs to no frame "
                "of this stack (the chain does not increase)" % (name, fp, sp))
    return None


def _trampoline_below_record(fp, sp, ctx):
    """(FailureKind, why) when a signal trampoline's address lies between sp and the frame record:
    the kernel entered this frame (a handler, or a function it tail-called), so its caller is the
    signal frame and the frame pointer is one the interrupted code left; None otherwise."""
    size = ctx.arch.address_size
    if sp is None or fp is None or not 0 < fp - sp <= TRAMPOLINE_WINDOW:
        return None
    try:
        data = bytes(ctx.read_memory(sp, fp - sp))
    except Exception:           # unreadable: the record's own checks decide
        return None
    for offset in range(0, len(data) - size + 1, size):
        word = int.from_bytes(data[offset:offset + size], ctx.arch.byteorder)
        if word and ctx.is_code(word) and sigframe.recognise(ctx, word) is not None:
            return (FailureKind.NO_FRAME_POINTER,
                    "[0x%x] = 0x%x, a signal trampoline, lies between sp and the frame record at 0x%x: the "
                    "kernel entered this frame, so %s is the interrupted code's" % (
                        sp + offset, word, fp, ctx.arch.name_of(ctx.arch.fp)))
    return None


# -- the step -----------------------------------------------------------------------

def step(frame, ctx):
    """Recover frame's caller from its frame record (or, at a function's edge, from sp)."""
    arch = ctx.arch
    if not arch.keeps_frame_records and bad_call_target_row(frame, ctx) is None:
        # (a call through a null pointer is an edge every arch's link register or [sp] answers)
        return Outcome.not_applicable(SOURCE, "no frame-pointer convention is known for %s" % arch.name,
                                      FailureKind.NOT_SUPPORTED)
    edge = stack_edge(frame, ctx, SOURCE)
    if edge is not None:
        return edge
    function = function_of(frame, ctx)
    fp = frame.registers.get(arch.fp)
    sp = frame.registers.get(arch.sp)
    evidence = StepEvidence(source=SOURCE, found_by="frame pointer", lookup_pc=ctx.lookup_pc(frame),
                            module=_module_name(ctx, frame),
                            entry={"function": function[0] if function else None,
                                   "function_start": function[1] if function else None,
                                   "start": function[1] if function else ctx.lookup_pc(frame),
                                   "frame_pointer": fp})
    edge = bad_call_target_row(frame, ctx) or prologue_row(frame, ctx, function)
    if edge is not None:
        row, kind, why = edge
        evidence.section, evidence.section_address = "the stack", sp
        evidence.found_by = "frame pointer: %s" % kind
        evidence.entry["kind"] = kind
        evidence.notes.append(why)
    else:
        pc = ctx.lookup_pc(frame)
        if function is not None and sets_up_frame_pointer(ctx, function[1], pc) is False:
            return Outcome.not_applicable(SOURCE, "%s does not set up a frame pointer (no `mov %s, %s` "
                                          "between its start 0x%x and 0x%x)" % (
                                              function[0], arch.name_of(arch.fp), arch.name_of(arch.sp),
                                              function[1], min(pc, function[1] + PROLOGUE_WINDOW)),
                                          FailureKind.NO_FRAME_POINTER)
        layout = chain_layout(ctx, function[1], pc) if function is not None else None
        problem = frame_pointer_problem(fp, sp, ctx, layout.below_sp if layout else 0) \
            or _trampoline_below_record(fp, sp, ctx)
        if problem:
            kind, why = problem
            return Outcome.failed(SOURCE, why, kind)
        row = chain_row(arch, ctx.lookup_pc(frame), layout.cfa_offset if layout else None)
        if layout is not None:
            evidence.notes.append(layout.why)
        evidence.section, evidence.section_address = "frame record", fp
        evidence.found_by = "frame pointer (%s chain)" % arch.name_of(arch.fp)
        evidence.entry["kind"] = "chain"
    outcome = step_with_row(row, frame, ctx, evidence)
    if outcome.status != AttemptStatus.RECOVERED:
        return outcome
    problem = _return_address_problem(outcome, ctx)
    if problem:
        return Outcome.failed(SOURCE, problem, FailureKind.NOT_AFTER_CALL, evidence=outcome.evidence)
    _note_saved_frame_pointer(outcome, fp, ctx, chained=edge is None)
    return keep_only_known(outcome, arch, "a frame-pointer step")


def _return_address_problem(outcome, ctx):
    """A return address that is code but follows no call: fp did not point at a frame record."""
    ra = outcome.registers.get(ctx.arch.pc)
    if not ra or not ctx.is_code(ra):
        return None     # 0 and non-code addresses are the engine's to judge (pc-zero, not-code)
    if ctx.arch.call_before(reader(ctx.read_memory), ra) is None and planted.planted_at(ctx, ra) is None:
        trampoline = sigframe.recognise(ctx, ra)
        if trampoline is not None:
            outcome.evidence.notes.append("return address 0x%x is a signal trampoline (%s): the kernel "
                                          "planted it, no call precedes it" % (ra, trampoline.why))
            return None
        return ("return address 0x%x does not follow a call instruction: %s does not point at a "
                "frame record" % (ra, ctx.arch.name_of(ctx.arch.fp)))
    return None


def _note_saved_frame_pointer(outcome, fp, ctx, chained):
    arch = ctx.arch
    saved = outcome.registers.get(arch.fp)
    if not chained or saved is None:
        return
    if saved == 0:
        outcome.evidence.notes.append("the saved frame pointer is 0: the chain ends with the caller")
    elif saved <= fp:
        outcome.evidence.notes.append(
            "the saved frame pointer 0x%x is not above this one (0x%x): the caller's frame pointer "
            "will not be usable" % (saved, fp))
