"""Forward analysis from the pc: the caller's frame read from the code that runs until the return.

Where a function's start is unknown (no symbol, no table, no call reaching
it), the instructions from the pc on still tell how the frame is torn down.
Every path is followed forward from the pc: both sides of a conditional
branch, direct jumps (a tail call's target returns to the same caller),
calls treated as returning with the ABI's effect (callee-saved registers
kept, the rest clobbered) unless known not to return or followed by alignment
padding (then the path ends there), each (address, state) visited once, within a
bound on instructions. The state is relative to the pc: the stack pointer is
PC+0, each callee-saved register holds "its value at pc" (caller(r)), each
stack word above the pc's stack pointer holds "the word there at pc"
(initial(k)), and a register the debugger says points into the stack just
above sp (a frame pointer, for `leave`) holds PC+k.

At each return the address it returns to must be a word that was on the
stack at pc (x86's `ret` pops the word at PC+k; Arm's `pop {..., pc}` and
`ldr pc, [sp], #4` load one, `bx lr` returns to one `pop {..., lr}` or `ldr
lr` loaded) or, for the innermost frame only, the link register's value at
pc, unchanged (`bx lr` in a leaf); each callee-saved register is then
unchanged since pc, restored from a word PC+j, or equal to PC+j. When every
path gives the same answers, the row at pc is CFA = sp + the stack pointer's
offset after the return (x86: k + word size), the return address from its
word (or lr, same value), each register from its slot. A conditional return
(Arm's `popne {r4, pc}`, `bxeq lr`) is a return on one side and falls through
unchanged on the other. A direct jump to a PLT stub is a tail call: it returns
to the caller as a return from the same state would. A call clobbers the link
register. An indirect jump,
a stack pointer set to an unknown value, an instruction that cannot be
decoded, a path that does not end within the bound or disagreeing returns
leave the frame undecided: never a guess.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from plugin.analysis.flow import BOUND_OF, BOUND_PENDING, CLOBBERED, NO_CALLEE, Callee, apply
from plugin.analysis.ops import Flow, Insn
from plugin.analysis.state import Kind, State, caller, plus, stack
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

PC = "pc"                      # the base of stack values relative to the stack pointer at pc
MAX_INSTRUCTIONS = 2048        # instructions executed over all paths before the analysis gives up
WORDS_TRACKED = 128            # words above the pc's stack pointer whose initial content is tracked
MAX_WRITTEN = 128              # stack words written below them before the analysis gives up
MAX_KNOWN_OFFSET = 1 << 16     # a register at most this far above sp is taken as a stack address


def initial(offset: int):
    """The word at PC+offset as it was at pc."""
    return (Kind.INITIAL, offset)


@dataclass(frozen=True)
class Ending:
    """What one return says: the caller's stack pointer, its return address and where each register comes from."""
    cfa: int                                  # sp after the return = sp at pc + cfa
    popped: int
    target: tuple                             # the return address: initial(k), or caller(link register)
    registers: Tuple[Tuple[int, tuple], ...]  # (register, its value at the return)


@dataclass
class Forward:
    row: Optional[Row] = None
    why: str = ""                             # why undecided
    returns: List[Insn] = field(default_factory=list)     # the return instruction of each path
    setters: Dict[object, Insn] = field(default_factory=dict)   # "cfa" or register -> instruction
    instructions: int = 0


def start_state(facts, known: Dict[int, int], link: bool = False) -> State:
    """The state at pc: known maps a register to its offset above the stack pointer at pc; link: the
    link register at pc may hold the return address (the innermost frame; after a call it does not)."""
    regs = {facts.SP: stack(PC, 0)}
    if link and facts.RA_REGISTER is not None:
        regs[facts.RA_REGISTER] = caller(facts.RA_REGISTER)
    for number in facts.CALLEE_SAVED:
        regs[number] = caller(number)
    for number, offset in known.items():
        if number != facts.SP and 0 <= offset < MAX_KNOWN_OFFSET:
            regs[number] = stack(PC, offset)
    word = facts.POINTER_SIZE
    mem = {(PC, k * word): initial(k * word) for k in range(WORDS_TRACKED)}
    return State(regs, mem, word)


def analyse(facts, pc: int, known: Dict[int, int], decode_at: Callable[[int], Optional[Insn]],
            noreturn: Callable[[Insn], bool] = lambda insn: False,
            callee: Callable[[Insn], Callee] = lambda insn: NO_CALLEE, link: bool = False,
            tail_call: Callable[[Insn], bool] = lambda insn: False) -> Forward:
    """Follow every path from pc to its return; the row at pc when all agree, else why not.
    tail_call(insn): does the direct jump enter another function (a PLT stub), which returns
    to this one's caller? It ends its path as a return would from the same state."""
    out = Forward()
    endings = {}
    seen = set()
    work = [(pc, start_state(facts, known, link), ())]
    while work:
        address, state, path = work.pop()
        key = (address, _frozen(state))
        if key in seen:
            continue
        seen.add(key)
        out.instructions += 1
        if out.instructions > MAX_INSTRUCTIONS:
            out.why = "the paths from 0x%x do not all end within %d instructions" % (pc, MAX_INSTRUCTIONS)
            return out
        insn = decode_at(address)
        if insn is None:
            out.why = "cannot decode an instruction at 0x%x" % address
            return out
        after = apply(insn, state, facts.SP)
        after.regs.pop(facts.BOUND, None)
        after.regs.pop(BOUND_OF, None)
        after.regs.pop(BOUND_PENDING, None)
        sp = after.reg(facts.SP)
        if sp[0] != Kind.STACK or sp[1] != PC:
            out.why = "0x%x `%s` sets the stack pointer to a value not known from the pc's" % (
                address, insn.text)
            return out
        if len(after.mem) > WORDS_TRACKED + MAX_WRITTEN:
            out.why = "the paths from 0x%x write more than %d stack words" % (pc, MAX_WRITTEN)
            return out
        path = path + (insn,)
        flow = insn.flow
        if flow in (Flow.RET, Flow.COND_RET) or (flow == Flow.JUMP and tail_call(insn)):
            taken = facts.taken(insn) if flow == Flow.COND_RET and hasattr(facts, "taken") else insn
            ending, why = _ending(facts, state, taken) if taken.flow in (Flow.RET, Flow.JUMP) else (
                None, "0x%x `%s`: a conditional return the analysis cannot read" % (address, insn.text))
            if ending is None:
                out.why = why
                return out
            endings.setdefault(ending, (insn, path))
            if insn not in out.returns:
                out.returns.append(insn)
            if flow == Flow.COND_RET:
                work.append((insn.end, after, path))
        elif flow == Flow.NEXT:
            work.append((insn.end, after, path))
        elif flow == Flow.JUMP:
            work.append((insn.target, after, path))
        elif flow == Flow.BRANCH:
            work += [(insn.target, after, path), (insn.end, after, path)]
        elif flow == Flow.CALL:
            following = decode_at(insn.end)
            # a call followed by alignment padding does not return: what follows is another function
            if not noreturn(insn) and following is not None and not facts.is_padding(following.text):
                work.append((insn.end, _after_call(facts, after, callee(insn)), path))
        elif flow == Flow.STOP:
            pass
        else:
            out.why = "0x%x `%s` jumps to an address the analysis does not follow" % (address, insn.text)
            return out
    if not endings:
        out.why = "no path from 0x%x reaches a return" % pc
        return out
    if len(endings) > 1:
        first, second = list(endings.values())[:2]
        out.why = "the returns at 0x%x and 0x%x leave different frames" % (first[0].address, second[0].address)
        out.returns = []
        return out
    ending, (_, path) = next(iter(endings.items()))
    out.row = _row(facts, pc, ending, start_state(facts, known, link))
    out.setters = _setters(facts, known, link, path, out.row)
    return out


def _frozen(state: State):
    return frozenset(state.regs.items()), frozenset(state.mem.items())


def _after_call(facts, state: State, found: Callee) -> State:
    after = state.copy()
    sp = after.reg(facts.SP)
    after.forget_below(sp)
    if found.popped:
        after.regs[facts.SP] = plus(sp, found.popped)
    for number in facts.CALL_CLOBBERED if found.clobbers is None else found.clobbers:
        after.regs[number] = CLOBBERED
    if facts.RA_REGISTER is not None:
        after.regs[facts.RA_REGISTER] = CLOBBERED       # the call wrote its own return address there
    if found.thunk is not None:
        after.regs[found.thunk] = (Kind.OTHER,)
    return after


def _ending(facts, state: State, insn: Insn):
    """(Ending, "") for a return executed in state, or (None, why it does not decide)."""
    after = apply(insn, state, facts.SP)
    sp = after.reg(facts.SP)
    if sp[0] != Kind.STACK or sp[1] != PC:
        return None, "0x%x `%s` leaves the stack pointer at a value not known from the pc's" % (
            insn.address, insn.text)
    loaded = getattr(facts, "PC", None)
    if facts.RA_REGISTER is None:             # the return pops the word at sp
        cfa, target = sp[2] + facts.POINTER_SIZE, state.mem.get((PC, sp[2]))
    elif loaded is not None and loaded in after.regs:
        cfa, target = sp[2], after.reg(loaded)     # pop {..., pc}, ldr pc, [sp], #4
    else:
        cfa, target = sp[2], state.reg(facts.RA_REGISTER)  # bx lr, mov pc, lr
    if target != caller(facts.RA_REGISTER) and (target is None or target[0] != Kind.INITIAL):
        return None, "0x%x `%s` returns to an address the code computed, not one on the stack at pc%s" % (
            insn.address, insn.text, "" if facts.RA_REGISTER is None else " or in the link register")
    registers = []
    for number in facts.CALLEE_SAVED:
        value = after.reg(number)
        if value[0] in (Kind.CALLER, Kind.INITIAL) or (value[0] == Kind.STACK and value[1] == PC):
            registers.append((number, value))
    return Ending(cfa, insn.popped, target, tuple(registers)), ""


def _row(facts, pc: int, ending: Ending, first: State) -> Row:
    cfa = ending.cfa
    if ending.target[0] == Kind.INITIAL:
        registers = {facts.RA: Rule(RuleKind.OFFSET, offset=ending.target[1] - cfa)}
    else:                                     # the link register at pc, kept to the return
        registers = {facts.RA: Rule(RuleKind.SAME)}
    values = dict(ending.registers)
    for number in facts.CALLEE_SAVED:
        value = values.get(number)
        if value == first.reg(number):
            continue                          # unchanged since pc: same (a stack address kept, too)
        if value is None:
            registers[number] = Rule(RuleKind.UNDEFINED)
        elif value[0] == Kind.INITIAL:
            registers[number] = Rule(RuleKind.OFFSET, offset=value[1] - cfa)
        elif value[0] == Kind.STACK:
            registers[number] = Rule(RuleKind.VAL_OFFSET, offset=value[2] - cfa)
        elif value[1] != number:
            registers[number] = Rule(RuleKind.REGISTER, register=value[1])
    return Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=facts.SP, offset=cfa), registers=registers,
               ra_signed=False)


def _setters(facts, known, link, path, row: Row) -> Dict[object, Insn]:
    """The last instruction on one path that changed the stack pointer, and that changed each register
    with a rule other than `same`: the instructions the row rests on, for the evidence."""
    found: Dict[object, Insn] = {}
    state = start_state(facts, known, link)
    for insn in path:
        after = apply(insn, state, facts.SP)
        if after.reg(facts.SP) != state.reg(facts.SP):
            found["cfa"] = insn
        for number in row.registers:
            if number in facts.CALLEE_SAVED and after.reg(number) != state.reg(number):
                found[number] = insn
        state = after
        if insn.flow == Flow.CALL:
            state = _after_call(facts, state, NO_CALLEE)
    return found
