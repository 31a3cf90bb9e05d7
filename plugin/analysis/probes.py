"""Windows x64 stack probes: calls the analysis follows by their contract, not the ABI's.

A frame over a page is allocated as `mov eax, N; call __chkstk; sub rsp, rax`:
the probe touches each page below rsp and returns with rsp and every register
but r10 and r11 (and the flags) as they were, so rax still holds N and the
`sub` is an exact allocation. A callee is taken for one on evidence only:

- its name, from the module's own symbols, is one of x86_64.STACK_PROBES
  (`__chkstk`: MSVC's and clang's; `___chkstk_ms`: MinGW's);
- or, at a call followed by `sub rsp, rax`, its code proves the contract: analysed
  from its entry with every integer register but rsp, r10 and r11 holding the
  caller's value, each reached `ret` finds rsp where it was at entry and each of
  those registers unchanged, with no call, no jump out of it and no path the
  analysis could not follow (MSVC's __chkstk saves and restores r10 and r11 on its
  stack; compiler-rt's pushes and pops rcx and rax).

Either way the Callee says why, and the analysis records it at the call
(FunctionAnalysis.notes).
"""
from __future__ import annotations

from typing import Callable, Optional

from plugin.analysis.flow import Analyser, Callee, entry_state
from plugin.analysis.ops import Flow
from plugin.analysis.state import CFA, caller, stack

WINDOW = 512            # bytes of a probe's code analysed: MSVC's and compiler-rt's are under 100
USES = ("sub rsp, rax",)    # what follows a probe's call (capstone's text)
GPRS = 16


def by_name(facts, target: int, name: Optional[str]) -> Optional[Callee]:
    if name is None or name not in getattr(facts, "STACK_PROBES", ()):
        return None
    return Callee(clobbers=facts.STACK_PROBE_CLOBBERS,
                  why="0x%x is %s (the module's own symbol): a Windows stack probe, which returns with rsp and "
                      "every register but r10 and r11 unchanged, so rax still holds the size the code subtracts "
                      "from rsp next" % (target, name))


class _KeepAll:
    """facts where every integer register but rsp and the probe's scratch registers is tracked from entry."""

    def __init__(self, facts):
        self._facts = facts
        self.CALLEE_SAVED = tuple(n for n in range(GPRS) if n != facts.SP and n not in facts.STACK_PROBE_CLOBBERS)
        self.CALL_CLOBBERED = tuple(range(GPRS))

    def __getattr__(self, name):
        return getattr(self._facts, name)


def by_code(facts, target: int, decode_at: Callable, read: Callable) -> Optional[Callee]:
    """The contract proven from the callee's code (see the module's docstring), or None."""
    if not getattr(facts, "STACK_PROBES", ()):
        return None
    keep = _KeepAll(facts)
    result = Analyser(keep, decode_at, read, lambda insn: False).run(
        target, target + WINDOW, [(target, entry_state(keep))])
    if result.unresolved or result.exits or result.gave_up:
        return None
    returns = 0
    for address, state in result.states.items():
        insn = result.insns.get(address)
        if insn is None or insn.flow in (Flow.CALL, Flow.INDIRECT, Flow.COND_RET):
            return None
        if insn.flow in (Flow.JUMP, Flow.BRANCH) and not target <= insn.target < target + WINDOW:
            return None
        if insn.flow == Flow.RET:
            if insn.popped or state.reg(keep.SP) != stack(CFA, keep.ENTRY_SP) \
                    or any(state.reg(r) != caller(r) for r in keep.CALLEE_SAVED):
                return None
            returns += 1
    if not returns:
        return None
    return Callee(clobbers=facts.STACK_PROBE_CLOBBERS,
                  why="0x%x keeps rsp and every register but r10 and r11 on each of its %d path(s) to a return "
                      "(its code, analysed): a stack probe, so rax still holds the size the code subtracts from "
                      "rsp next" % (target, returns))
