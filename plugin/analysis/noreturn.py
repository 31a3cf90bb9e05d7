"""Which functions of a module never return, decided once for the whole module before any check.

A call's callee never returns when its symbol's name says so (abort, exit,
__cxa_throw, ...: plugin.analysis.NORETURN_NAMES), or, for any other function
of the module (named or not), when no path of its code reaches a return.
The second is decided here over the control flow alone, for all of them at
once, as the least fixed point of "returns": a function returns
when some path from its first instruction reaches a `ret`, a tail call of a
function that returns, or an indirect jump (a table or a tail call the flow
cannot follow: assumed to return), passing only calls of functions that
return. Paths follow jumps into the parts a table says are not entered by a
call (GCC's `.cold` parts), as the state analysis does. The answer depends
on the code alone, not on which function was analysed first: the same for
`--jobs 1` and `--jobs N`, and computed once in the parent process.
"""
from __future__ import annotations

import bisect
from typing import Callable, Dict, List, Optional, Set, Tuple

from plugin.analysis.ops import Flow

RETURNS, NEVER, PENDING = "returns", "never", "pending"


class Module:
    """The functions of one module as the flow sees them: starts, ends, parts, names."""

    def __init__(self, functions: Dict[int, int], parts, decode_at: Callable,
                 named: Callable[[int], Optional[bool]], slot_named: Callable[[int], Optional[bool]],
                 falls_through: Optional[Callable[[int], int]] = None):
        self.starts = sorted(functions)
        self.functions = functions
        self.parts = parts
        self.decode_at = decode_at
        self.named = named              # address -> never returns, by its name; None: no name
        self.slot_named = slot_named    # GOT slot address -> the same, by the slot's symbol
        # address -> the size of the instruction there when it only falls through (0: not known so;
        # decode_at tells): a path runs over those without an Insn each
        self.falls_through = falls_through or (lambda address: 0)
        self._own_ends: Dict[int, int] = {}     # root -> own_range_end(root), asked on every straight run

    def own_range_end(self, root: int) -> int:
        """The end of the addresses from root on whose home is root: its end, or the next start."""
        end = self._own_ends.get(root)
        if end is None:
            i = bisect.bisect_right(self.starts, root)
            end = self.functions[root]
            end = self._own_ends[root] = min(end, self.starts[i]) if i < len(self.starts) else end
        return end

    def home(self, address: int) -> Optional[int]:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.functions[self.starts[i]]:
            return self.starts[i]
        return None


def decide(module: Module) -> Dict[int, bool]:
    """{start: never returns} for every function of module that is not a part and whose name (if any)
    does not decide."""
    roots = [s for s in module.starts if s not in module.parts and module.named(s) is None]
    status: Dict[int, str] = {root: PENDING for root in roots}
    seen: Dict[int, Set[int]] = {root: set() for root in roots}
    waiting: Dict[int, List[Tuple[int, int]]] = {}
    decoded: Set[int] = set()
    work: List[Tuple[int, int]] = [(root, root) for root in reversed(roots)]
    falls_through = module.falls_through

    def returns(root):
        status[root] = RETURNS
        seen.pop(root, None)
        for waiter, address in waiting.pop(root, ()):
            if status[waiter] == PENDING:
                work.append((waiter, address))

    while work:
        root, address = work.pop()
        if status[root] != PENDING:
            continue
        if address is None:                         # a tail call of a callee now known to return
            returns(root)
            continue
        visited = seen[root]
        if address in visited:
            continue
        visited.add(address)
        size = falls_through(address)
        if size:
            _straight_on(module, root, address, size, visited, work)
            decoded.add(root)
            continue
        insn = module.decode_at(address)
        if insn is None:
            continue
        decoded.add(root)
        for outcome in _step(module, root, insn, status):
            if outcome == RETURNS:
                returns(root)
                break
            if isinstance(outcome, tuple):          # ("wait", callee, resume at or None: a tail call)
                waiting.setdefault(outcome[1], []).append((root, outcome[2]))
            else:
                work.append((root, outcome))
    return {root: state == PENDING and root in decoded for root, state in status.items()}


def _straight_on(module: Module, root: int, address: int, size: int, visited: set, work: list) -> None:
    """From an instruction at address that falls through (size: its size), over the ones after it that
    fall through too, while they are root's own (not another function's, nor a part's: those go to
    the work list as _step's NEXT sends them); the first one that does not goes to the work list."""
    own_end = module.own_range_end(root)
    falls_through = module.falls_through
    while True:
        address += size
        if not root <= address < own_end:
            work.extend((root, a) for a in _inside(module, root, address))
            return
        if address in visited:
            return
        size = falls_through(address)
        if not size:
            work.append((root, address))
            return
        visited.add(address)


def _step(module: Module, root: int, insn, status) -> list:
    """Where one instruction of root's paths leads: addresses, RETURNS, ("wait", callee, resume)."""
    flow = insn.flow
    if flow in (Flow.RET, Flow.COND_RET):
        return [RETURNS]
    if flow == Flow.STOP:
        return []
    if flow == Flow.NEXT:
        return _inside(module, root, insn.end)
    if flow == Flow.BRANCH:
        return _jump(module, root, insn.target, status) + _inside(module, root, insn.end)
    if flow == Flow.JUMP:
        return _jump(module, root, insn.target, status)
    if flow == Flow.CALL:
        if insn.target is None:
            return [] if _named_never(module, insn) else _inside(module, root, insn.end)
        named = module.named(insn.target)
        if named is not None:
            return [] if named else _inside(module, root, insn.end)
        callee = status.get(insn.target)
        if callee is None or callee == RETURNS:     # not a function the tables list: assumed to return
            return _inside(module, root, insn.end)
        return [("wait", insn.target, insn.end)]
    # An indirect jump: a table or a tail call the flow does not follow, assumed to return; through
    # a GOT slot, by the slot's name.
    return [] if _named_never(module, insn) else [RETURNS]


def _named_never(module: Module, insn) -> bool:
    return bool(insn.through_memory and insn.indirect and insn.indirect[1][0] == "addr"
                and module.slot_named(insn.indirect[1][1]))


def _inside(module: Module, root: int, address: int) -> list:
    """The next instruction when it is in root or a part; running off the end into another function
    ends the path (the call before it did not return)."""
    home = module.home(address)
    if home == root or home in module.parts:
        return [address]
    return []


def _jump(module: Module, root: int, target: Optional[int], status) -> list:
    """Where a jump's target leads: into root or a part, or a tail call."""
    if target is None:
        return [RETURNS]
    home = module.home(target)
    if home == root or home in module.parts:
        return [target]
    if home is not None and target != home:
        return [RETURNS]        # into the middle of another function: not followed, assumed to return
    named = module.named(target)
    if named is not None:
        return [] if named else [RETURNS]
    callee = status.get(target)
    if callee is None or callee == RETURNS:
        return [RETURNS]        # a tail call of a function that returns (or one the tables do not list)
    return [("wait", target, None)]
