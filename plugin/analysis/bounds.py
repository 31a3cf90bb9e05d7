"""Jump-table bounds: how many entries a table indexed by a register has, from the code before the jump.

The x86 decoder (plugin.analysis.x86) sets pseudo-registers: BOUND, the
immediate of the last `cmp x, N`; BOUND_OF, what that compare compared (a
register, or ("mem", address)), moved along by copies (`mov %edi,%edi`,
`mov (%rsi),%eax` after `cmpl $N,(%rsi)`) and dropped when that register is
written; BOUND_PENDING, set by the compare until the branch after it says
whether this path is the one where x <= N (an unsigned `ja`/`jae`/`jb`/`jbe`;
any other branch drops the bound). A byte zero-extended into a register
bounds it by 255. Bounds from two paths join to the larger
(plugin.analysis.state.UPPER_BOUNDS). Other architectures set BOUND alone.
"""
from __future__ import annotations

from typing import Optional

from plugin.analysis.ops import Insn
from plugin.analysis.state import Kind, State, addr, unknown

MAX_TABLE_ENTRIES = 4096
BOUND = 1000                      # pseudo-register the decoders set to the last compared immediate
BOUND_OF = 1001                   # pseudo-register: what that compare compared: ("addr", register number or
                                  # ("mem", address)); ("addr", None) once that register is written again
BOUND_PENDING = 1002              # pseudo-register: the compare's bound waits for the branch after it
NOT_PENDING = unknown("no compare waits for its branch")
_ADDR = Kind.ADDR                 # read on every x86 mov: a global, not an attribute of the enum


def bounded_entries(state: State, index) -> Optional[int]:
    """How many entries a table indexed by register `index` has, from the compare before the jump
    (`cmp $N, index; ja`: N + 1) or a zero-extended byte index (256); None when not bounded."""
    bound = state.regs.get(BOUND)
    if bound is None or bound[0] != Kind.ADDR or not isinstance(bound[1], int) \
            or not 0 <= bound[1] < MAX_TABLE_ENTRIES or _pending(state):
        return None
    of = state.regs.get(BOUND_OF)
    if of is not None and index is not None and of != addr(index):
        return None          # the compare was of another value, or the index changed since
    return bound[1] + 1


def _pending(state: State) -> bool:
    found = state.regs.get(BOUND_PENDING)
    return found is not None and found[0] == Kind.ADDR


def _pending_if(expr, state: State):
    """("pending_if", source): a zero-extension of the compared value before its branch keeps it waiting."""
    return state.regs[BOUND_PENDING] if _pending(state) and state.regs.get(BOUND_OF) == addr(expr[1]) \
        else NOT_PENDING


def branch_bound(insn: Insn, state: State, taken: bool) -> State:
    """The state on one path of the branch right after `cmp value, N`: on the path where an unsigned
    compare says value <= N (or < N: the bound becomes N - 1) the bound holds (no longer pending); on
    every other path it is gone."""
    if not _pending(state):
        return state
    out = state.copy()
    out.regs[BOUND_PENDING] = NOT_PENDING
    kept = insn.bound_kept
    if kept is None or kept[0] != ("taken" if taken else "next"):
        out.regs[BOUND] = unknown("the compare before 0x%x is not a range check on this path" % insn.address)
    elif kept[1] and state.regs.get(BOUND, NOT_PENDING)[0] == Kind.ADDR:
        out.regs[BOUND] = addr(state.regs[BOUND][1] - kept[1])    # `jae`/`jb`: x < N
    return out


def drop_pending(state: State, insn: Insn) -> None:
    """An instruction that writes the flags between a compare and its branch: no bound from that compare."""
    if _pending(state):
        state.regs[BOUND_PENDING] = NOT_PENDING
        state.regs[BOUND] = unknown("0x%x overwrites the flags of the compare before it" % insn.address)


def _narrow(expr, state: State):
    """("narrow", most, source): the bound of a value zero-extended from a byte: an earlier compare's
    of that byte when smaller, else `most`."""
    bound = state.regs.get(BOUND)
    if state.regs.get(BOUND_OF) == addr(expr[2]) and bound is not None and bound[0] == Kind.ADDR \
            and isinstance(bound[1], int) and 0 <= bound[1] <= expr[1]:
        return bound
    return addr(expr[1])


def bound_load(expr, state: State):
    """("bound_load", source, register): a copy of the compared value keeps the compare's bound."""
    of = state.regs.get(BOUND_OF)
    if of is None:
        return UNCOMPARED
    if of == (_ADDR, expr[1]):          # addr(expr[1]), without the call (every x86 mov comes here)
        return (_ADDR, expr[2])
    if of == (_ADDR, expr[2]):
        return UNCOMPARED           # the compared register is overwritten
    return of


def _abs_table(expr, state: State):
    """("abs_table", index, table, size): entry `index` of a table of code addresses."""
    return (Kind.TARGET, expr[2], expr[3], bounded_entries(state, expr[1]), None)


UNCOMPARED = addr(None)
BOUND_EXPRESSIONS = {"narrow": _narrow, "bound_load": bound_load, "abs_table": _abs_table,
                     "pending_if": _pending_if}


