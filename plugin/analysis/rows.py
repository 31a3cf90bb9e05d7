"""What an analysis State says about the frame, in the terms of unwind rows.

`cfa_of` finds a register (or a slot a register points at) that holds the
CFA; `locations` lists where the caller's value of a register is; `text`
renders both like a table row (`CFA=rsp+16 => rbx=[CFA-24] rip=[CFA-8]`).
`symbolic` evaluates the simple DWARF expressions tables use (breg,
bregx, deref, plus_uconst, constants, plus, minus) over a State, so a row
given by an expression can be judged by meaning.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from plugin.analysis.state import CFA, OTHER, Kind, State, caller, plus, stack
from plugin.formats.dwarf_ops import Fault, operations
from plugin.model.rules import CfaKind, RuleKind

CFA_ZERO = stack(CFA, 0)
_STACK = Kind.STACK         # read once per analysed instruction: a global, not an attribute of the enum


def cfa_of(state: State, facts) -> Optional[Tuple[int, int, bool]]:
    """(register, offset, deref): CFA = reg + offset, or *(reg + offset); None when nothing holds it.

    The stack pointer is preferred, then the frame pointer, then any
    register; a realigned frame (DRAP) is found through the slot the frame
    pointer addresses that holds the CFA.
    """
    regs = state.regs
    value = regs.get(facts.SP)
    if value is not None and value[0] == _STACK and value[1] == CFA:
        return facts.SP, -value[2], False       # the common case, first
    for number in (facts.SP, facts.FP):
        value = regs.get(number)
        if value is not None and value[0] == Kind.STACK and value[1] == CFA:
            return number, -value[2], False
    order = [facts.SP, facts.FP] + sorted(r for r in regs if r not in (facts.SP, facts.FP) and r >= 0)
    for number in order:
        value = state.regs.get(number)
        if value is not None and value[0] == Kind.STACK and value[1] == CFA:
            return number, -value[2], False
    holders = {key: value for key, value in state.mem.items() if value == CFA_ZERO}
    if holders:
        for number in order:
            value = state.regs.get(number)
            if value is not None and value[0] == Kind.STACK:
                for (base, offset) in holders:
                    if base == value[1]:
                        return number, offset - value[2], True
    return None


def locations(state: State, number: int) -> Tuple[bool, List[tuple]]:
    """(the register still holds the caller's value, [(base, offset) of slots holding it])."""
    wanted = caller(number)
    return state.regs.get(number) == wanted, [key for key, value in state.mem.items() if value == wanted]


def register_text(state: State, number: int) -> str:
    held, slots = locations(state, number)
    places = ["[CFA%+d]" % offset for base, offset in sorted(slots, key=lambda s: str(s)) if base == CFA]
    places += ["[aligned%+d]" % offset for base, offset in slots if base != CFA]
    if held:
        places.insert(0, "same")
    if places:
        return "|".join(places)
    value = state.regs.get(number)
    if value is not None and value[0] == Kind.UNKNOWN:
        return "unknown (%s)" % value[1]
    return "lost"


def cfa_text(state: State, facts, arch) -> str:
    found = cfa_of(state, facts)
    if found is None:
        sp = state.reg(facts.SP)
        return "unknown (%s)" % (sp[1] if sp[0] == Kind.UNKNOWN else "no register holds a known CFA offset")
    number, offset, deref = found
    core = "%s%+d" % (arch.name_of(number), offset) if offset else arch.name_of(number)
    return "*(%s)" % core if deref else core


def text(state: State, facts, arch) -> str:
    parts = []
    for number in sorted(set(facts.CALLEE_SAVED) | {facts.RA}):
        held, slots = locations(state, number)
        if slots or not held:
            parts.append("%s=%s" % (arch.name_of(number), register_text(state, number)))
    out = "CFA=%s" % cfa_text(state, facts, arch)
    return out + (" => " + " ".join(parts) if parts else "")


# -- DWARF expressions over abstract values --



_CONSTANT_OPS = {
    0x1A: lambda a, b: a & b, 0x21: lambda a, b: a | b, 0x27: lambda a, b: a ^ b,
    0x1E: lambda a, b: a * b, 0x24: lambda a, b: a << b if b < 64 else 0,
    0x25: lambda a, b: a >> b if b < 64 else 0, 0x29: lambda a, b: int(a == b),
    0x2A: lambda a, b: int(a >= b), 0x2B: lambda a, b: int(a > b), 0x2C: lambda a, b: int(a <= b),
    0x2D: lambda a, b: int(a < b), 0x2E: lambda a, b: int(a != b),
}


def symbolic(expression: bytes, state: State, initial=None, pc=None, pc_register=None):
    """The abstract value of a simple DWARF expression, or None when it uses anything else.

    With pc and pc_register, the pc register is the constant pc (the PLT
    rules compute the CFA from rip).
    """
    stack_ = [] if initial is None else [initial]

    def register(number):
        if pc is not None and number == pc_register:
            return (Kind.ADDR, pc)
        return state.reg(number)
    try:
        for op, operands in operations(bytes(expression), state.word):
            if 0x70 <= op <= 0x8F:                       # DW_OP_breg0..31
                stack_.append(plus(register(op - 0x70), operands[0]))
            elif op == 0x92:                             # DW_OP_bregx
                stack_.append(plus(register(operands[0]), operands[1]))
            elif op == 0x06:                             # DW_OP_deref
                stack_.append(state.slot(stack_.pop(), state.word))
            elif op == 0x23:                             # DW_OP_plus_uconst
                stack_.append(plus(stack_.pop(), operands[0]))
            elif 0x30 <= op <= 0x4F:                     # DW_OP_lit0..31
                stack_.append((Kind.ADDR, op - 0x30))
            elif op in (0x08, 0x09, 0x11):               # DW_OP_const1u / const1s / consts
                stack_.append((Kind.ADDR, operands[0]))
            elif op in (0x22, 0x1C):                     # DW_OP_plus / DW_OP_minus
                b, a = stack_.pop(), stack_.pop()
                if b[0] != Kind.ADDR:
                    if op == 0x1C or a[0] != Kind.ADDR:
                        return None
                    a, b = b, a
                stack_.append(plus(a, b[1] if op == 0x22 else -b[1]))
            elif op in _CONSTANT_OPS:
                b, a = stack_.pop(), stack_.pop()
                if a[0] != Kind.ADDR or b[0] != Kind.ADDR:
                    return None
                stack_.append((Kind.ADDR, _CONSTANT_OPS[op](a[1], b[1]) & ((1 << 64) - 1)))
            else:
                return None
    except (IndexError, Fault):
        return None
    if not stack_:
        return None
    value = stack_[-1]
    return value if value != OTHER else None


def is_abi_entry(row, facts) -> bool:
    """Does this row describe a function just called: CFA = sp + entry offset, RA where the call put it?"""
    cfa = row.cfa
    if cfa.kind != CfaKind.REGISTER or cfa.register != facts.SP or cfa.deref or cfa.offset != -facts.ENTRY_SP:
        return False
    for number in facts.CALLEE_SAVED:
        rule = row.registers.get(number)
        if rule is not None and rule.kind != RuleKind.SAME:
            return False
    rule = row.registers.get(facts.RA)
    if facts.RA_REGISTER is None:
        return rule is not None and rule.kind == RuleKind.OFFSET and facts.ENTRY_SLOTS.get(rule.offset) == facts.RA
    return rule is None or rule.kind == RuleKind.SAME


def entry_from_row(row, facts) -> Optional[State]:
    """The state a table's first row claims at a function's start, for functions not entered by a call.

    Only a CFA on the stack pointer and saved-at-offset or unchanged
    registers can be set up; anything else gives None.
    """
    cfa = row.cfa
    if cfa.kind != CfaKind.REGISTER or cfa.register != facts.SP or cfa.deref:
        return None
    regs = {facts.SP: stack(CFA, -cfa.offset)}
    mem = {}
    tracked = list(facts.CALLEE_SAVED) + [facts.RA]
    for number in tracked:
        rule = row.registers.get(number)
        if rule is None or rule.kind == RuleKind.SAME:
            if number != facts.RA or facts.RA_REGISTER is not None:
                regs[number] = caller(number)
        elif rule.kind == RuleKind.OFFSET:
            mem[(CFA, rule.offset)] = caller(number)
        elif rule.kind != RuleKind.UNDEFINED:      # undefined (an outermost frame): nothing to track
            return None
    return State(regs, mem, facts.POINTER_SIZE)
