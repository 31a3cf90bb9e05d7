"""Apply a Row to a frame's registers: the caller's registers, and what was read.

Every table source is translated into plugin.model.rules.Row, so this is the one
place where rules meet memory. It never guesses: a register whose rule needs
a value we do not have is left out of the caller, and a CFA or return
address that cannot be computed is a RowError with the reads so far.
"""
from __future__ import annotations

from plugin.errors import DecodeError, MemoryReadError
from plugin.model.evidence import Read
from plugin.model.outcome import FailureKind, error_kind
from plugin.model.rules import CfaKind, RuleKind
from plugin.formats import dwarf_expr


class RowError(Exception):
    """A row that cannot be applied: what kind of failure, the sentence, and the reads so far."""

    def __init__(self, kind: FailureKind, reason: str, reads=()):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.reads = list(reads)


class RowEvaluation:
    def __init__(self, cfa, registers, reads, undefined):
        self.cfa = cfa
        self.registers = registers      # the caller's registers: DWARF number -> value
        self.reads = reads
        self.undefined = undefined      # DWARF numbers whose rule is "undefined"


def evaluate_row(row, arch, registers, read_memory):
    """Caller registers for `registers` under `row`.

    The caller's stack pointer is the CFA unless the row says otherwise;
    callee-saved registers with no rule keep their value (the ABI promises
    it); other registers with no rule are unknown in the caller.
    """
    reads = []
    mask = arch.mask

    def read_word(what, address):
        try:
            data = read_memory(address, arch.address_size)
        except MemoryReadError as exc:
            raise RowError(FailureKind.UNREADABLE_MEMORY, "cannot read %s at 0x%x: %s" % (what, address, exc),
                              reads) from None
        value = int.from_bytes(data, arch.byteorder)
        reads.append(Read(what, address, arch.address_size, value))
        return value

    def run(expression, what, initial=(), cfa=None):
        def tracked_read(address, size):
            data = read_memory(address, size)
            reads.append(Read("%s (expression)" % what, address, size,
                              int.from_bytes(data, arch.byteorder)))
            return data
        try:
            return dwarf_expr.evaluate(expression, arch=arch, read_register=registers.get,
                                       read_memory=tracked_read, initial_stack=initial, cfa=cfa).value
        except (DecodeError, MemoryReadError) as exc:
            raise RowError(error_kind(exc), "expression for %s: %s" % (what, exc), reads) from None

    cfa_rule = row.cfa
    if cfa_rule.kind == CfaKind.EXPRESSION:
        cfa = run(cfa_rule.expression, "CFA")
    else:
        base = registers.get(cfa_rule.register)
        if base is None:
            raise RowError(FailureKind.UNKNOWN_REGISTER,
                              "CFA needs %s, whose value is unknown" % arch.name_of(cfa_rule.register), reads)
        cfa = (base + cfa_rule.offset) & mask
        if cfa_rule.deref:
            cfa = (read_word("CFA", cfa) + cfa_rule.added) & mask

    caller = {}
    for number in arch.callee_saved:
        value = registers.get(number)
        if value is not None:
            caller[number] = value
    caller[arch.sp] = cfa
    undefined = set()
    for number, rule in row.registers.items():
        name = arch.name_of(number)
        kind = rule.kind
        if kind == RuleKind.UNDEFINED:
            caller.pop(number, None)
            undefined.add(number)
        elif kind == RuleKind.SAME:
            value = registers.get(number)
            if value is not None:
                caller[number] = value
        elif kind == RuleKind.OFFSET:
            caller[number] = read_word(name, (cfa + rule.offset) & mask)
        elif kind == RuleKind.VAL_OFFSET:
            caller[number] = (cfa + rule.offset) & mask
        elif kind == RuleKind.REGISTER:
            value = registers.get(rule.register)
            if value is not None:
                caller[number] = value
            else:
                caller.pop(number, None)
        elif kind == RuleKind.EXPRESSION:
            caller[number] = read_word(name, run(rule.expression, name, (cfa,), cfa))
        elif kind == RuleKind.VAL_EXPRESSION:
            caller[number] = run(rule.expression, name, (cfa,), cfa)
    return RowEvaluation(cfa, caller, reads, undefined)
