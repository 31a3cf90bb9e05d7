"""The checks the engine applies to every caller a source recovers, by failure kind.

A recovered caller must lie above its callee on the same stack (the CFA
grows), its return address must be code, and it must not be its callee
again; across a signal frame, where the stack may switch, its CFA must be
stack memory instead. A caller entered by a planted address (a trap
handler's) is looked up at its exact pc.
"""

from plugin.model.outcome import FailureKind
from plugin.model.rules import RuleKind


def implausible(outcome, frame, ctx, sp, previous_cfa):
    """(FailureKind, why) when a recovered caller fails the engine's checks, else None."""
    arch = ctx.arch
    cfa = outcome.evidence.cfa if outcome.evidence else None
    caller_pc = outcome.registers.get(arch.pc)
    switched = outcome.signal_frame or getattr(outcome.evidence, "stack_switch", False)
    if switched:
        problem = _switched_stack_problem(cfa, ctx)
        if problem:
            return problem
    elif cfa is not None and sp is not None:
        may_equal = frame.exact_pc      # a leaf or interrupted frame may have CFA == sp
        if cfa < sp or (cfa == sp and not may_equal):
            return FailureKind.CFA_NOT_INCREASING, "CFA 0x%x is not above the stack pointer 0x%x" % (cfa, sp)
    if (cfa is not None and previous_cfa is not None and cfa <= previous_cfa and not frame.signal_frame
            and not switched):
        return (FailureKind.CFA_NOT_INCREASING,
                "CFA 0x%x does not increase (callee's CFA 0x%x)" % (cfa, previous_cfa))
    if caller_pc is not None and caller_pc == frame.pc and (
            outcome.registers.get(arch.sp) == sp or _pc_left_unchanged(outcome, arch)):
        return (FailureKind.NO_RETURN_ADDRESS,
                "the caller would be identical to its callee (pc 0x%x, %s): the row gives no return address"
                % (caller_pc, "same sp" if outcome.registers.get(arch.sp) == sp else
                   "the return-address rule leaves the callee's own pc"))
    if caller_pc not in (None, 0) and not ctx.is_code(caller_pc):
        return (FailureKind.RETURN_ADDRESS_NOT_CODE,
                "return address 0x%x is not in executable memory" % caller_pc)
    return None


def _pc_left_unchanged(outcome, arch):
    """Does the applied row leave the return-address column as it was (no rule, or "same")?"""
    row = outcome.evidence.rule if outcome.evidence else None
    if row is None or not hasattr(row, "registers"):
        return False
    rule = row.registers.get(arch.ra)
    return rule is None or rule.kind == RuleKind.SAME


def _switched_stack_problem(cfa, ctx):
    """(FailureKind, why) when a signal frame's CFA is not in stack memory, else None.

    A signal frame may switch stacks (a sigaltstack above or below the
    interrupted stack, a coroutine's stack), so the CFA need not grow across
    it; it must still lie in readable, writable memory, and the walk's
    repeated-frame check keeps it from looping.
    """
    if cfa is None or not ctx.knows_mappings():
        return None
    mapping = ctx.mapping_at(cfa)
    if (mapping is None or not mapping.readable) and _overflowed_stack(cfa, ctx):
        return None
    if mapping is None or not mapping.readable:
        return FailureKind.UNREADABLE_MEMORY, "the interrupted frame's CFA 0x%x is in no readable mapping" % cfa
    if not mapping.writable:
        return (FailureKind.NOT_STACK_MEMORY,
                "the interrupted frame's CFA 0x%x is in %s, which is not writable stack memory"
                % (cfa, mapping.name or "a read-only mapping"))
    return None


# Linux keeps this much unmapped below a stack that grows down (stack_guard_gap,
# 256 pages), and a thread's stack has an inaccessible guard mapping below it:
# a thread that overflowed its stack faults there, so a signal handler on its
# alternate stack may interrupt a frame whose sp lies in either.
STACK_GUARD_GAP = 256 * 4096


def _overflowed_stack(address, ctx):
    """Is address in the guard gap just below a writable mapping: the sp of a frame that overflowed its stack?"""
    above = ctx.mapping_above(address)
    return above is not None and above.writable and above.start - address <= STACK_GUARD_GAP


def after_trap_handler(frame, caller_pc, outcome, ctx):
    """Is the caller looked up at its exact pc because of a trap handler (its own function or frame's)?"""
    handler = ctx.trap_handler(caller_pc)
    if handler is None:
        handler = ctx.trap_handler(ctx.lookup_pc(frame))
        if handler is None:
            return False
        why = "%s returns to it: a trap handler's caller is looked up at its exact pc" % handler
    else:
        why = "0x%x is in %s, a trap handler (trap-handler-names): entered by a planted address, not a call, " \
              "so it is looked up at its exact pc" % (caller_pc, handler)
    if outcome.evidence is not None:
        outcome.evidence.notes.append(why)
    return True
