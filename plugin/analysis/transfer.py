"""What one instruction does to what the analysis knows: the transfer function of plugin.analysis.flow.

An instruction's effects (plugin.analysis.ops) are applied in order to a
State (plugin.analysis.state), each expression evaluated against the state
left by the previous effect; the entry state is what a call leaves at a
function's first instruction. The worklist that follows every path with
these is plugin.analysis.flow.
"""
from __future__ import annotations

from plugin.analysis.bounds import (BOUND_EXPRESSIONS, BOUND_OF, BOUND_PENDING, NOT_PENDING, UNCOMPARED,
                                    bound_load, bounded_entries, drop_pending)
from plugin.analysis.ops import Insn
from plugin.analysis.state import CFA, OTHER, UNSET, Kind, State, addr, caller, plus, stack, unknown


_ADDR, _STACK, _UNKNOWN = Kind.ADDR, Kind.STACK, Kind.UNKNOWN    # read per instruction: globals


def entry_state(arch_facts) -> State:
    regs = {arch_facts.SP: stack(CFA, arch_facts.ENTRY_SP)}
    for number in arch_facts.CALLEE_SAVED:
        regs[number] = caller(number)
    if arch_facts.RA_REGISTER is not None:
        regs[arch_facts.RA_REGISTER] = caller(arch_facts.RA_REGISTER)
    mem = {(CFA, k): caller(r) for k, r in arch_facts.ENTRY_SLOTS.items()}
    return State(regs, mem, arch_facts.POINTER_SIZE)


def entry_like(state: State, arch_facts) -> bool:
    """The frame is torn down: the stack pointer is where it was at entry."""
    return state.reg(arch_facts.SP) == stack(CFA, arch_facts.ENTRY_SP)


def evaluate(expr, state: State):
    kind = expr[0]
    if kind == "reg":
        return state.reg(expr[1])
    if kind == "add":
        return plus(evaluate(expr[1], state), expr[2])
    if kind == "load":
        return state.slot(evaluate(expr[1], state), expr[2])
    if kind == "addr":
        return addr(expr[1])
    if kind == "other":
        return OTHER
    bound = BOUND_EXPRESSIONS.get(kind)
    if bound is not None:
        return bound(expr, state)
    if kind == "sub":              # expr minus a register holding a known constant (`sub rsp, rax`)
        amount = state.reg(expr[2])
        if amount[0] == Kind.ADDR:
            return plus(evaluate(expr[1], state), -amount[1])
        return unknown(expr[3])
    if kind == "syscall_sp":
        number = state.reg(expr[1])
        if number[0] == Kind.ADDR and number[1] in expr[3]:
            return unknown("a clone system call: on the child's path the stack pointer is the new thread's")
        return state.reg(expr[2])
    if kind == "align":
        value = evaluate(expr[1], state)
        if value[0] == Kind.STACK:
            return stack(("align", expr[2]), 0)
        return unknown("realigned a stack pointer the analysis did not know")
    if kind == "table":
        base = state.reg(expr[1])
        count = bounded_entries(state, expr[4] if len(expr) > 4 else None)
        if base[0] != Kind.ADDR:
            return OTHER
        return (Kind.TABLE, base[1] + expr[3], expr[2], count, base[1])     # entries relative to base
    if kind == "target":
        a, b = state.reg(expr[1]), state.reg(expr[2])
        if a[0] == Kind.ADDR:
            a, b = b, a
        if a[0] == Kind.TABLE and b[0] == Kind.ADDR and a[4] == b[1]:
            return (Kind.TARGET, a[1], a[2], a[3], a[4])
        return OTHER
    return unknown(expr[1] if len(expr) > 1 and isinstance(expr[1], str) else "not followed")


def apply(insn: Insn, state: State, sp: int, share: bool = False) -> State:
    """The state after insn. share: the result may be `state` itself (an instruction without effects,
    or one whose effects change nothing), or hold the same stack-slot dict (one that stores nothing):
    for callers that never change a state in place once made (the worklist; join makes new states)."""
    pending = not insn.flags_kept and state.regs.get(BOUND_PENDING, NOT_PENDING)[0] == _ADDR
    if share and not insn.effects and not pending:
        return state
    out = State(dict(state.regs), state.mem if share else dict(state.mem), state.word)
    regs = out.regs
    own_mem = not share
    if pending:
        drop_pending(out, insn)         # the flags a compare set are overwritten before its branch
    temporaries = None                  # the registers it uses on its way (negative numbers; no state holds one)
    for effect in insn.effects:
        if effect[0] == "set":
            number, expr = effect[1], effect[2]
            if number < 0:
                temporaries = [number] if temporaries is None else temporaries + [number]
            kind = expr[0]
            if kind == "other":         # the commonest expressions, without a call
                value = OTHER
            elif kind == "reg":
                value = regs.get(expr[1], UNSET)
            elif kind == "addr":
                value = (_ADDR, expr[1])
            elif kind == "add" and expr[1][0] == "reg":
                value = plus(regs.get(expr[1][1], UNSET), expr[2])
            elif kind == "bound_load":   # every x86 mov: what a compare compared moves with it
                value = bound_load(expr, out)
            elif kind == "load" and expr[1][0] == "add" and expr[1][1][0] == "reg":
                value = out.slot(plus(regs.get(expr[1][1][1], UNSET), expr[1][2]), expr[2])
            else:
                value = evaluate(expr, out)
            if number == sp and value[0] != _STACK and value[0] != _UNKNOWN:
                value = unknown("%s sets the stack pointer to a value the analysis does not know"
                                % insn.text)
            regs[number] = value
            compared = regs.get(BOUND_OF)
            if compared is not None and compared[1] == number and number != BOUND_OF:
                regs[BOUND_OF] = UNCOMPARED      # the compared register changed: the bound is gone
        else:
            if not own_mem:
                out.mem, own_mem = dict(out.mem), True
            where, what = effect[1], effect[3]
            if where[0] == "add" and where[1][0] == "reg":     # push, mov [rsp + k], reg: without evaluate
                where = plus(regs.get(where[1][1], UNSET), where[2])
            else:
                where = evaluate(where, out)
            out.store(where, effect[2], regs.get(what[1], UNSET) if what[0] == "reg" else evaluate(what, out))
    if temporaries is not None:
        for temporary in temporaries:
            regs.pop(temporary, None)
    if share and regs == state.regs and (out.mem is state.mem or out.mem == state.mem):
        return state                    # nothing changed (a register that held a computed value gets another)
    return out
