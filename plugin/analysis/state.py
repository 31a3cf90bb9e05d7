"""What the analysis knows at one instruction: abstract register and stack-slot values.

A value is one of:

- ``caller(r)``: the caller's value of register r, untouched (for the return
  address column: the return address the call pushed or put in the link
  register);
- ``stack(base, k)``: the address base + k, where base is the CFA or the
  result of one stack realignment (an ``and`` of the stack pointer, whose
  relation to the CFA is unknown);
- ``addr(a)``: a known constant address (rip-relative ``lea``), kept only to
  follow jump tables, or a constant moved to x86's accumulator (a stack probe's size);
- ``OTHER``: a value computed here, known not to be any of the above;
- ``unknown(reason)``: anything (paths disagree, loaded from memory the
  analysis does not follow, an adjustment by a register).

A State maps DWARF register numbers to values (absent: unknown) and stack
slots, (base, offset) pairs, to the value last stored there (absent: not
written by this function). Join is the lattice meet used where paths meet:
equal values stay, different ones become unknown.
"""
from __future__ import annotations

from enum import Enum
from itertools import repeat
from typing import Dict, Tuple


class Kind(str, Enum):
    CALLER = "caller"
    STACK = "stack"
    ADDR = "addr"
    TABLE = "table"        # a value loaded from a jump table at a known address (entry, scale, signed)
    TARGET = "target"      # table entry + table base: a jump target
    OTHER = "other"
    UNKNOWN = "unknown"
    INITIAL = "initial"    # the word a stack slot held at the pc a forward analysis starts from

    # Hashed as the string it equals, in C (Enum's own __hash__ is Python code, and every value
    # tuple holding a Kind is hashed where paths join): also what `==` with that string implies.
    __hash__ = str.__hash__


_UNKNOWN, _STACK, _ADDR, _OTHER = Kind.UNKNOWN, Kind.STACK, Kind.ADDR, Kind.OTHER   # per instruction: globals
CFA = "cfa"                # the base of stack values relative to the canonical frame address

Value = Tuple              # (Kind, ...) see the constructors below


def caller(register: int) -> Value:
    return (Kind.CALLER, register)


def stack(base, offset: int) -> Value:
    return (Kind.STACK, base, offset)


def addr(address: int) -> Value:
    return (Kind.ADDR, address)


OTHER: Value = (Kind.OTHER,)


def unknown(reason: str) -> Value:
    return (Kind.UNKNOWN, reason)


UNSET = unknown("not tracked")


def plus(value: Value, k: int) -> Value:
    """value + k for stack and address values; other values become OTHER or stay unknown."""
    kind = value[0]
    if kind == _STACK:
        return (_STACK, value[1], value[2] + k)
    if kind == _ADDR:
        return (_ADDR, value[1] + k)
    if kind == _UNKNOWN:
        return value
    return OTHER


class State:
    """regs: DWARF number -> Value; mem: (base, offset) -> Value; word: bytes in a register (only
    whole-word slots hold a tracked value). Slots: one is made for every instruction that changes
    something, on every path."""
    __slots__ = ("regs", "mem", "word", "known")

    def __init__(self, regs: Dict[int, Value], mem: Dict[tuple, Value], word: int = 8):
        self.regs = regs
        self.mem = mem
        self.word = word
        self.known = None           # _known(self), once this state is met with another

    def __eq__(self, other) -> bool:
        return isinstance(other, State) and self.regs == other.regs and self.mem == other.mem \
            and self.word == other.word

    __hash__ = None

    def __repr__(self) -> str:
        return "State(regs=%r, mem=%r, word=%r)" % (self.regs, self.mem, self.word)

    def reg(self, number: int) -> Value:
        return self.regs.get(number, UNSET)

    def copy(self) -> "State":
        return State(dict(self.regs), dict(self.mem), self.word)

    def slot(self, address: Value, size: int) -> Value:
        """What a load of `size` bytes from the stack address gives."""
        if address[0] == _UNKNOWN:
            return address
        if address[0] != _STACK:
            return OTHER               # not this frame's stack: not a saved register
        found = self.mem.get((address[1], address[2]))
        if found is None:
            return unknown("loaded from a stack slot this function did not write")
        return found if size == self.word else OTHER

    def store(self, address: Value, size: int, value: Value) -> None:
        """Record a store; a store through an untracked pointer is assumed not to hit saved slots."""
        if address[0] != _STACK:
            return
        base, offset = address[1], address[2]
        for key in [k for k in self.mem if k[0] == base and k[1] < offset + size and offset < k[1] + self.word]:
            del self.mem[key]
        if value[0] == _UNKNOWN:
            self.mem[(base, offset)] = value
        elif size == self.word and value[0] != _OTHER:
            self.mem[(base, offset)] = value
        # Anything else leaves the slot absent: it holds nothing the analysis tracks.

    def copy_above(self, address: Value) -> "State":
        """A copy without the slots below the stack address (copy() then forget_below(address))."""
        if address[0] != _STACK:
            return self.copy()
        base, offset = address[1], address[2]
        return State(dict(self.regs), {k: v for k, v in self.mem.items() if k[0] != base or k[1] >= offset},
                     self.word)

    def forget_below(self, address: Value) -> None:
        """A call: the callee's frame overwrites everything below the stack pointer."""
        if address[0] != _STACK:
            return
        for key in [k for k in self.mem if k[0] == address[1] and k[1] < address[2]]:
            del self.mem[key]


UPPER_BOUNDS = (1000,)     # pseudo-registers holding an upper bound (a jump table's last index): joined by max


def join(old: State, new: State, where: int) -> Tuple[State, bool]:
    """(old met with new, whether it changed). Disagreeing values become unknown; two upper
    bounds (UPPER_BOUNDS) become the larger."""
    if old is new:
        return old, False
    keys, values, slots, contents = _known(old)
    if list(map(new.regs.get, keys, repeat(UNSET))) == values \
            and list(map(new.mem.get, slots, repeat(None))) == contents and new.mem.keys() <= old.mem.keys():
        return old, False           # new agrees wherever old knows something: the common case, in C
    regs = _meet(old.regs, new.regs, UNSET, where)
    if regs is not None:
        for number in UPPER_BOUNDS:
            a, b = old.regs.get(number), new.regs.get(number)
            if a is not None and b is not None and a[0] == b[0] == Kind.ADDR and a != b \
                    and isinstance(a[1], int) and isinstance(b[1], int):
                regs[number] = a if a[1] > b[1] else b
        if regs == old.regs:
            regs = None
    mem = _meet(old.mem, new.mem, None, where)
    if regs is None and mem is None:
        return old, False
    return State(old.regs if regs is None else regs, old.mem if mem is None else mem, old.word), True


def _known(state: State) -> tuple:
    """(registers, their values, slots, their values) where the state's value is not unknown; made once
    per state. A state is not changed once it has been met with another (the worklist makes new ones)."""
    known = state.known
    if known is None:
        regs, mem = state.regs, state.mem
        keys = [k for k, v in regs.items() if v[0] != _UNKNOWN]
        slots = [k for k, v in mem.items() if v[0] != _UNKNOWN]
        known = state.known = (keys, list(map(regs.__getitem__, keys)), slots, list(map(mem.__getitem__, slots)))
    return known



def _meet(old: dict, new: dict, missing, where):
    """old met with new, or None when that is old itself. missing: what an absent key means
    (UNSET for registers: unknown already; None for slots: not written, which disagrees)."""
    if old is new or old == new:
        return None
    out = None
    disagree = None
    get = new.get
    for key, a in old.items():
        if a[0] == _UNKNOWN:
            continue
        b = get(key, missing)
        if a is not b and a != b:
            if out is None:
                out = dict(old)
                disagree = unknown("paths disagree at 0x%x" % where)
            out[key] = disagree
    if missing is None:
        for key in new.keys() - old.keys():
            if out is None:
                out = dict(old)
                disagree = unknown("paths disagree at 0x%x" % where)
            out[key] = disagree
    return out
