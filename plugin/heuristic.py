"""Where the debugger's own heuristic unwinder already gives a caller the plugin would accept.

Where no table covers a frame, GDB falls back on a prologue heuristic of its
own (modelled per architecture: Arch.debugger_prologue_row, from the start
GDB knows for the function: its symbol, or none). The plugin's `analysis`
source reads the same code exactly, but `frame-pointer` and `scan` guess.
When such a guess differs from the debugger's heuristic caller and that
caller passes every check the engine applies to a caller (plugin.checks,
and a return address that follows a call or is a signal trampoline), two
guesses disagree and neither is evidence against the other: to keep the
promise that the plugin only adds, GDB's claim path declines the frame, so
GDB's own answer stands, and `unwind explain` gives this module's sentence.
"""

from typing import Optional

from plugin import checks
from plugin.arch import reader
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome
from plugin.settings import Trust
from plugin.strategies import sigframe
from plugin.strategies.evaluate import UnwindError, evaluate_row

GUESSES = (Trust.FRAME_POINTER.value, Trust.SCAN.value)   # sources that guess rather than read code or tables
SOURCE = "debugger heuristic"
SYMBOLS_CACHE_KEY = "heuristic: file symbols"    # module.cache: the function symbols of its file


def yields_to_debugger(outcome: Outcome, frame, ctx) -> Optional[str]:
    """Why the guessed caller in `outcome` should give way to the debugger's own heuristic
    answer for `frame` (a different caller the engine's checks accept), or None."""
    if outcome.source not in GUESSES or outcome.signal_frame or outcome.outermost:
        return None
    model = debugger_answer(frame, ctx)
    if model is None:
        return None
    answer, why = model
    arch = ctx.arch
    ours = (outcome.registers.get(arch.pc), outcome.registers.get(arch.sp))
    theirs = (answer.registers.get(arch.pc), answer.registers.get(arch.sp))
    if ours == theirs:
        return None
    return ("the debugger's own heuristic gives another caller the plugin's checks accept (pc 0x%x, sp 0x%x; %s), "
            "and the plugin's %s answer is a guess too (pc %s, sp %s): declined, so GDB's own answer stands"
            % (theirs[0], theirs[1], why, outcome.source, _hex(ours[0]), _hex(ours[1])))


def debugger_answer(frame, ctx):
    """(Outcome, why) of the debugger's heuristic for frame, when modelled and its caller passes
    the engine's checks; else None."""
    found = modelled_answer(frame, ctx)
    if found is None:
        return None
    answer, why = found
    arch = ctx.arch
    ra = answer.registers.get(arch.pc)
    if not ra or checks.implausible(answer, frame, ctx, frame.registers.get(arch.sp), None):
        return None
    read = reader(ctx.read_memory)
    if arch.call_before(read, ra) is None and sigframe.recognise(ctx, ra) is None:
        return None
    return answer, why


def modelled_answer(frame, ctx):
    """(Outcome, why): the caller the debugger's own heuristic gives for frame, unchecked; None
    where it is not modelled or finds no caller (a register or stack slot it needs is unknown)."""
    arch = ctx.arch
    read = reader(ctx.read_memory)
    if frame.exact_pc and arch.return_at(read, frame.pc):
        return None             # GDB's epilogue unwinder may take a frame at its return: not modelled
    lookup = ctx.lookup_pc(frame)
    model = arch.debugger_prologue_row(read, _function_start(ctx, lookup), frame.pc)
    if model is None:
        return None
    try:
        result = evaluate_row(model.row, arch, frame.registers, ctx.read_memory)
    except UnwindError:
        return None
    evidence = StepEvidence(source=SOURCE, found_by=model.why, lookup_pc=lookup, rule=model.row, arch=arch,
                            cfa=result.cfa, reads=result.reads, caller_registers=result.registers)
    return Outcome(AttemptStatus.RECOVERED, SOURCE, registers=result.registers, evidence=evidence), model.why


def _function_start(ctx, lookup) -> Optional[int]:
    """The start of the function holding lookup as the debugger knows it: its symbol (debug
    information, or the file's symbol tables: GDB's minimal symbols), or None."""
    found = ctx.symbol(lookup)
    if found is not None:
        return found[1]
    module = ctx.modules.find(lookup)
    if module is None:
        return None
    from plugin.targets.elf import symbol_in
    found = symbol_in(_file_symbols(module), lookup)
    return found[1] if found is not None else None


def _file_symbols(module):
    table = module.cache.get(SYMBOLS_CACHE_KEY)
    if table is None:
        table = ([], [])
        if module.path and module.format == "elf":
            from elftools.common.exceptions import ELFError
            from elftools.elf.elffile import ELFFile
            from plugin.targets.elf import _function_symbols as function_symbols   # .symtab, else .dynsym
            try:
                with open(module.path, "rb") as handle:
                    table = function_symbols(ELFFile(handle), module.load_bias)
            except (OSError, ELFError, ValueError):
                pass
        module.cache[SYMBOLS_CACHE_KEY] = table
    return table


def _hex(value):
    return "?" if value is None else "0x%x" % value
