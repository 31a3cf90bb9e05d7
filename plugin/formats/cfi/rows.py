"""The CFI interpreter: a CIE's and an FDE's instructions run into rows.

Each Row (plugin/model/rules.py) says, for an address range inside the FDE,
how to compute the CFA and how to recover each register. The choices made
here (restore, remember/restore state, def_cfa_register with no CFA, rows
at advances, the guards against hostile programs) are listed in the package
docstring (plugin/formats/cfi/__init__.py).
"""
from __future__ import annotations

from plugin.arch import Arch
from plugin.errors import DecodeError, DecodeKind
from plugin.formats.cfi.entries import CIE, FDE
from plugin.formats.cfi.instructions import (
    ADVANCES, CFA_AARCH64_NEGATE_RA_STATE_WITH_PC, CFA_DEF_CFA, CFA_DEF_CFA_EXPRESSION,
    CFA_DEF_CFA_OFFSET, CFA_DEF_CFA_OFFSET_SF, CFA_DEF_CFA_REGISTER, CFA_DEF_CFA_SF,
    CFA_GNU_ARGS_SIZE, CFA_GNU_WINDOW_SAVE, CFA_NOP, CFA_REMEMBER_STATE, CFA_RESTORE,
    CFA_RESTORE_EXTENDED, CFA_RESTORE_STATE, CFA_SET_LOC, OPCODE_NAMES, program, register_cfa)
from plugin.model.rules import CfaKind, Row, Rule

_MAX_STATE_DEPTH = 1000      # DW_CFA_remember_state nesting (real code: 1 or 2)
# Rows and remembered states copy the register rules; a hostile program with
# thousands of registers and thousands of advances would make that quadratic.
# Real FDEs copy a few hundred rules at most (libc's largest: 287).
_MAX_RULE_COPIES = 1 << 22


def _initial_state(cie: CIE, arch: Arch) -> tuple:
    """(cfa, rules, args_size, ra_signed) after the CIE's initial instructions."""
    cached = cie._initial
    if cached is not None and cached[0] == arch.name:
        return cached[1]
    state = _run(cie, arch)
    cie._initial = (arch.name, state)
    return state


def _run(owner: CIE | FDE, arch: Arch, stop_pc: int | None = None, partial: list | None = None):
    """Interpret the program of `owner`.

    For a CIE: returns the initial state (cfa, rules, args_size, ra_signed).
    For an FDE: returns the list of Rows, or with stop_pc the one Row in
    force at stop_pc (executing only as far as needed). With `partial` (a
    list), an FDE's DecodeError is appended there and the rows before the
    bad instruction are returned instead of raising.
    """
    rows = []
    try:
        return _interpret(owner, arch, stop_pc, rows)
    except DecodeError as exc:
        if partial is None:
            raise
        partial.append(exc)
        return rows


def _interpret(owner, arch, stop_pc, rows):
    is_fde = isinstance(owner, FDE)
    name = owner.section.name
    base = owner.instructions_offset
    if is_fde:
        cfa, initial_rules, args_size, ra_signed = _initial_state(owner.cie, arch)
        rules = dict(initial_rules)
        loc, end = owner.start, owner.end
    else:
        cfa, initial_rules, args_size, ra_signed = None, None, 0, False
        rules = {}
        loc = end = 0
    aarch64 = arch.name == "aarch64"
    stack = []
    copies = 0
    note = ""
    # The offset of the last register+offset CFA rule: DW_CFA_def_cfa_register
    # after an expression keeps it, as libgcc, GDB and readelf do.
    last_offset = 0 if cfa is None or cfa.kind != CfaKind.REGISTER else cfa.offset
    for at, op, a, b in program(owner):
        if op in ADVANCES or op == CFA_SET_LOC:
            if not is_fde:
                raise DecodeError(name, base + at, "%s in a CIE's initial instructions"
                                  % OPCODE_NAMES[op], DecodeKind.MALFORMED)
            if op == CFA_SET_LOC:
                if a < loc:
                    raise DecodeError(name, base + at, "DW_CFA_set_loc to 0x%x moves back from 0x%x"
                                      % (a, loc), DecodeKind.MALFORMED)
                new = a
            else:
                new = loc + a
            if new == loc:
                continue
            if new >= end:
                break               # nothing after this applies inside the FDE
            if cfa is None:
                raise _no_cfa(name, base + at, loc)
            if stop_pc is not None and new > stop_pc:
                return Row(loc, cfa, rules, new, args_size, ra_signed, note)
            copies += len(rules)
            if copies > _MAX_RULE_COPIES:
                raise DecodeError(name, base + at, "program too large: over %d rule copies"
                                  % _MAX_RULE_COPIES, DecodeKind.LIMIT)
            rows.append(Row(loc, cfa, dict(rules), new, args_size, ra_signed, note))
            loc = new
            note = ""
        elif op == CFA_DEF_CFA_OFFSET and cfa is not None and cfa.kind == CfaKind.REGISTER:
            cfa = register_cfa(cfa.register, a)     # the common case
            last_offset = a
        elif op == CFA_NOP:
            pass
        elif b.__class__ is Rule:
            rules[a] = b
        elif op == CFA_RESTORE or op == CFA_RESTORE_EXTENDED:
            if initial_rules is not None and a in initial_rules:
                rules[a] = initial_rules[a]
            else:
                rules.pop(a, None)
        elif op == CFA_DEF_CFA_OFFSET or op == CFA_DEF_CFA_OFFSET_SF:
            if cfa is None or cfa.kind != CfaKind.REGISTER:
                raise DecodeError(name, base + at, "%s but the CFA is %s, not register+offset"
                                  % (OPCODE_NAMES[op], "undefined" if cfa is None else "an expression"),
                                  DecodeKind.MALFORMED)
            cfa = register_cfa(cfa.register, a)
            last_offset = a
        elif op == CFA_DEF_CFA or op == CFA_DEF_CFA_SF or op == CFA_DEF_CFA_EXPRESSION:
            cfa = b
            if b.kind == CfaKind.REGISTER:
                last_offset = b.offset
        elif op == CFA_DEF_CFA_REGISTER:
            if cfa is not None and cfa.kind != CfaKind.REGISTER:
                note = ("DW_CFA_def_cfa_register at +0x%x while the CFA was an expression: kept "
                        "the previous offset %d, as libgcc and GDB do" % (base + at, last_offset))
            cfa = register_cfa(a, 0 if cfa is None else last_offset)
        elif op == CFA_REMEMBER_STATE:
            if len(stack) >= _MAX_STATE_DEPTH:
                raise DecodeError(name, base + at, "DW_CFA_remember_state nested deeper than %d"
                                  % _MAX_STATE_DEPTH, DecodeKind.LIMIT)
            copies += len(rules)
            if copies > _MAX_RULE_COPIES:
                raise DecodeError(name, base + at, "program too large: over %d rule copies"
                                  % _MAX_RULE_COPIES, DecodeKind.LIMIT)
            stack.append((cfa, dict(rules), ra_signed, last_offset))
        elif op == CFA_RESTORE_STATE:
            if not stack:
                raise DecodeError(name, base + at, "DW_CFA_restore_state with no remembered state",
                                  DecodeKind.MALFORMED)
            cfa, rules, ra_signed, last_offset = stack.pop()
        elif op == CFA_GNU_ARGS_SIZE:
            args_size = a
        elif op == CFA_GNU_WINDOW_SAVE:
            if aarch64:
                ra_signed = not ra_signed   # DW_CFA_AARCH64_negate_ra_state
            # Elsewhere it is SPARC's register-window save, which says nothing
            # about the registers this plugin unwinds: accepted and ignored.
        elif op == CFA_AARCH64_NEGATE_RA_STATE_WITH_PC:
            if not aarch64:
                raise DecodeError(name, base + at, "unknown CFA opcode 0x%02x on %s" % (op, arch.name),
                                  DecodeKind.UNSUPPORTED)
            ra_signed = not ra_signed
        else:                                       # pragma: no cover - decoder and interpreter agree
            raise DecodeError(name, base + at, "unhandled CFA opcode 0x%02x" % op, DecodeKind.UNSUPPORTED)
    if not is_fde:
        return cfa, rules, args_size, ra_signed
    if cfa is None:
        raise _no_cfa(name, owner.offset, loc)
    if stop_pc is not None:
        return Row(loc, cfa, rules, end, args_size, ra_signed, note)
    rows.append(Row(loc, cfa, rules, end, args_size, ra_signed, note))
    return rows


def _no_cfa(name, offset, loc):
    return DecodeError(name, offset, "the row at 0x%x has no CFA rule (no DW_CFA_def_cfa* before it)"
                       % loc, DecodeKind.MALFORMED)


def execute(fde: FDE, arch: Arch) -> list[Row]:
    """All rows of `fde`: the CIE's initial instructions, then the FDE's.

    Rows are in address order and each has `end` set; the last ends at
    fde.end. A register appears in `registers` only when a rule was given.
    """
    return _run(fde, arch)


def execute_contained(fde: FDE, arch: Arch) -> tuple[list[Row], DecodeError | None]:
    """(rows, None), or with a bad instruction (the rows before it, its DecodeError):
    the rows from the bad instruction to fde.end are unknown."""
    errors = []
    rows = _run(fde, arch, partial=errors)
    return rows, (errors[0] if errors else None)


def row_at(fde: FDE, pc: int, arch: Arch) -> Row | None:
    """The row in force at pc, or None when pc is outside [fde.start, fde.end)."""
    if not fde.start <= pc < fde.end:
        return None
    return _run(fde, arch, stop_pc=pc)


def uses_set_loc(owner: CIE | FDE) -> bool:
    """Whether the program of owner has a DW_CFA_set_loc (rows at absolute addresses)."""
    return any(op == CFA_SET_LOC for _, op, _, _ in program(owner))
