"""The debugger-neutral half of `unwind validate`'s stepping: the loop, and what it asks of a module.

An adapter (gdb_unwinder/validate.py, lldb_commands/validate.py) implements
Stepper; run() drives it and a plugin.validate.live.LiveValidation until
the function returns or the bound on steps is reached.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from plugin.errors import MemoryReadError
from plugin.validate import ehabi_live
from plugin.validate.live import Ending, LiveValidation


class Stepper:
    """What a debugger adapter provides: the innermost registers, one step over calls, where it is."""

    def registers(self) -> Dict[int, int]:
        raise NotImplementedError

    def step(self, over: bool) -> Optional[tuple]:
        """One instruction; over: a call, stepped over (its callee runs to its return).
        None when it simply stopped at the next instruction; else (Ending, detail)
        for anything else (exit, another stop)."""
        raise NotImplementedError

    def where(self) -> str:
        """The stop, for people: `0x... in caller`."""
        raise NotImplementedError


def run(validation: LiveValidation, stepper: Stepper, limit: int) -> tuple:
    """Step until the function returns or `limit` steps: (Ending, steps, detail)."""
    steps = 0
    while True:
        registers = stepper.registers()
        if validation.returned(registers):
            return Ending.RETURNED, steps, ""
        if steps >= limit:
            return Ending.STEP_LIMIT, steps, ""
        validation.observe(registers)
        # Only calls are stepped over: a debugger's "step over" elsewhere may
        # take a label inside the function for a new function and run to its end.
        stopped = stepper.step(over=validation.is_call(registers[validation.arch.pc]) is not False)
        steps += 1
        if stopped is not None:
            return stopped[0], steps, stopped[1]


def table_sources(sources: Sequence[str], explicit: bool, is_fallback) -> List[str]:
    """The sources to check: as given with -sources, else the table sources of the setting."""
    return list(sources) if explicit else [s for s in sources if not is_fallback(s)]


def is_function_entry(target, modules, pc: int) -> bool:
    """Is pc a function's first instruction, by its symbol or the CFI entry covering it?"""
    try:
        found = target.symbol(pc)
    except Exception:           # symbols only help
        found = None
    if found and found[1] == pc:
        return True
    fde = _fde(target, modules, pc)
    return (fde is not None and fde.start == pc) or ehabi_live.entry_range(target, modules, pc) is not None


def function_end(target, modules, entry: int) -> Optional[int]:
    """The end of the CFI (else .ARM.exidx) entry starting at entry (the function's extent), or None."""
    fde = _fde(target, modules, entry)
    if fde is not None and fde.start == entry:
        return fde.end
    found = ehabi_live.entry_range(target, modules, entry)
    return found[1] if found else None


def _fde(target, modules, pc):
    from plugin.errors import DecodeError
    from plugin.strategies.cfi import CfiTables
    module = modules.find(pc)
    if module is None:
        return None
    try:
        hit = CfiTables.of(module, target).lookup(pc)
    except (DecodeError, MemoryReadError):
        return None
    return None if hit is None else hit.fde


def decoder(arch, read_memory, registers=None):
    """address -> one decoded instruction (capstone), or None when capstone is absent or the bytes are not code.
    registers: those at the function's entry (on Arm, CPSR.T says Thumb or Arm code)."""
    try:
        from plugin import analysis
        if not analysis.supported(arch):
            return None
        code = analysis.CodeAnalysis(arch, read_memory, thumb=ehabi_live.is_thumb(arch, registers or {}))
    except ImportError:
        return None

    return code.decode_at
