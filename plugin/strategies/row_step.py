"""The step every table-driven source shares once it has a Row.

CFI, SFrame and compact unwind differ in how they find the row for a pc;
after that, computing the CFA, reading saved registers, spotting the
outermost frame and stripping pointer authentication are the same.
"""

from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome


def step_with_row(row, frame, ctx, evidence, signal_frame=False):
    arch = ctx.arch
    evidence.rule = row
    evidence.arch = arch
    try:
        result = evaluate_row(row, arch, frame.registers, ctx.read_memory)
    except RowError as exc:
        evidence.reads = exc.reads
        return Outcome.failed(evidence.source, exc.reason, exc.kind, evidence=evidence)
    evidence.cfa = result.cfa
    evidence.reads = result.reads
    if arch.ra in result.undefined:
        evidence.notes.append("the return address rule is 'undefined': this is the outermost frame")
        return Outcome(AttemptStatus.RECOVERED, evidence.source,
                       "%s marks the return address undefined at 0x%x" % (evidence.found_by, evidence.lookup_pc),
                       registers=None,
                       evidence=evidence, outermost=True, signal_frame=signal_frame)
    caller, notes = return_address(row, arch, frame.registers, result.registers)
    evidence.notes.extend(notes)
    if caller is None:
        return Outcome.failed(evidence.source,
                              "the row gives no value for the return address (%s)" % arch.name_of(arch.ra),
                              FailureKind.NO_RETURN_ADDRESS, evidence=evidence)
    evidence.caller_registers = caller
    return Outcome(AttemptStatus.RECOVERED, evidence.source, registers=caller, evidence=evidence,
                   signal_frame=signal_frame)


def return_address(row, arch, registers, caller):
    """(caller with its pc set from the return address, notes), or (None, notes) when the row
    gives no return address. Shared by step_with_row and the plans' replay (plugin/plans.py)."""
    notes = []
    ra = caller.get(arch.ra)
    if ra is None and arch.ra != arch.pc and arch.ra not in row.registers:
        # No rule for a return-address register (Arm's lr, aarch64's x30): it keeps
        # its value, as GDB's DWARF unwinder treats an unspecified register; a
        # leaf's rows say nothing about lr.
        ra = registers.get(arch.ra)
        if ra is not None:
            caller[arch.ra] = ra
            notes.append("the row has no rule for %s: it keeps its value 0x%x (same value), "
                         "the return address" % (arch.name_of(arch.ra), ra))
    if ra is None:
        return None, notes
    if row.ra_signed:
        stripped = arch.strip_pointer_auth(ra)
        if stripped != ra:
            notes.append("return address 0x%x is signed; pointer-auth bits stripped: 0x%x" % (ra, stripped))
        ra = stripped
    caller[arch.pc] = arch.return_to(ra, registers, caller)
    return caller, notes
