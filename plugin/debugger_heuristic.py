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
Where the analysis proves a caller and GDB's heuristic gives that very
caller (same_as_debugger), GDB's frame is right and better (it keeps the
locations of saved registers): the claim path leaves that frame to GDB too.
"""
from __future__ import annotations

from typing import Optional

from plugin import checks
from plugin.arch import PrologueModel, reader
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, Outcome
from plugin.model.rules import CfaKind, Row, RuleKind
from plugin.modules.module import ModuleFormat
from plugin.settings import Trust
from plugin.strategies import sigframe
from plugin.strategies.evaluate import RowError, evaluate_row

GUESSES = (Trust.FRAME_POINTER.value, Trust.SCAN.value)   # sources that guess rather than read code or tables
SOURCE = "debugger heuristic"
SYMBOLS_CACHE_KEY = "heuristic: file symbols"    # module.cache: the function symbols of its file


def yields_to_debugger(outcome: Outcome, frame, ctx) -> Optional[str]:
    """Why the guessed caller in `outcome` should give way to the debugger's own heuristic
    answer for `frame` (a different caller the engine's checks accept), or None."""
    if outcome.source not in GUESSES or outcome.signal_frame or outcome.outermost:
        return None
    model = _model(frame, ctx)
    if model is None or _same_rules(model.row, getattr(outcome.evidence, "rule", None), ctx.arch):
        return None             # not modelled, or the very rules the plugin applied: the same caller
    answer = debugger_answer(frame, ctx, model)
    if answer is None:
        return None
    arch = ctx.arch
    ours = (outcome.registers.get(arch.pc), outcome.registers.get(arch.sp))
    theirs = (answer.registers.get(arch.pc), answer.registers.get(arch.sp))
    if ours == theirs:
        return None
    return ("the debugger's own heuristic gives another caller the plugin's checks accept (pc 0x%x, sp 0x%x; %s), "
            "and the plugin's %s answer is a guess too (pc %s, sp %s): declined, so GDB's own answer stands"
            % (theirs[0], theirs[1], model.why, outcome.source, _hex(ours[0]), _hex(ours[1])))


def same_as_debugger(outcome: Outcome, frame, ctx) -> Optional[str]:
    """Why the debugger's own heuristic frame is the very frame `outcome` proves (the same pc, sp
    and value of every register the outcome restores), so the debugger's frame, with its saved
    register locations, should stand; None where it is not modelled or gives another caller."""
    if outcome.signal_frame or outcome.outermost:
        return None
    model = _model(frame, ctx)
    answer = modelled_answer(frame, ctx, model) if model is not None else None
    if answer is None:
        return None
    arch, ours, theirs = ctx.arch, outcome.registers, answer.registers
    if ours.get(arch.pc) is None or ours.get(arch.sp) is None:
        return None
    for number in set(ours) | set(theirs):
        mine = ours.get(number, frame.registers.get(number))     # no rule: the callee's value
        if mine is not None and theirs.get(number, frame.registers.get(number)) != mine:
            return None
    return ("the debugger's own heuristic gives this very caller (pc 0x%x, sp 0x%x; %s): left to it, "
            "so its frame keeps the locations of the registers it restores"
            % (ours.get(arch.pc, 0), ours.get(arch.sp, 0), model.why))


def debugger_answer(frame, ctx, model=None) -> Optional[Outcome]:
    """The debugger's heuristic caller for frame, when modelled and it passes the engine's checks."""
    answer = modelled_answer(frame, ctx, model)
    if answer is None:
        return None
    arch = ctx.arch
    ra = answer.registers.get(arch.pc)
    if not ra or checks.implausible(answer, frame, ctx, frame.registers.get(arch.sp), None):
        return None
    if arch.call_before(reader(ctx.read_memory), ra) is None and sigframe.recognise(ctx, ra) is None:
        return None
    return answer


def modelled_answer(frame, ctx, model=None) -> Optional[Outcome]:
    """The caller the debugger's own heuristic gives for frame, unchecked (evidence.found_by says
    why); None where it is not modelled or finds no caller (a register or slot it needs is unknown)."""
    model = model or _model(frame, ctx)
    if model is None:
        return None
    arch = ctx.arch
    try:
        result = evaluate_row(model.row, arch, frame.registers, ctx.read_memory)
    except RowError:
        return None
    evidence = StepEvidence(source=SOURCE, found_by=model.why, lookup_pc=ctx.lookup_pc(frame), rule=model.row,
                            arch=arch, cfa=result.cfa, reads=result.reads, caller_registers=result.registers)
    return Outcome(AttemptStatus.RECOVERED, SOURCE, registers=result.registers, evidence=evidence)


def _model(frame, ctx) -> Optional[PrologueModel]:
    """The architecture's model of the debugger's heuristic at frame's pc, kept per walk context
    (by module generation, function start and pc: deep stacks repeat them)."""
    arch = ctx.arch
    read = reader(ctx.read_memory)
    if frame.exact_pc and arch.return_at(read, frame.pc):
        return None             # GDB's epilogue unwinder may take a frame at its return: not modelled
    start = debugger_function_start(ctx, ctx.lookup_pc(frame))
    models = ctx.prologue_models.for_generation(ctx.target.generation)
    return models.lookup((start, frame.pc), arch.debugger_prologue_row, read, start, frame.pc)


def _same_rules(row, applied, arch) -> bool:
    """Do two rows compute the caller's pc and sp alike (CFA from one register and offset, the
    return address at one offset from it)?"""
    if not isinstance(applied, Row):
        return False
    mine, theirs = row.cfa, applied.cfa
    if (mine.kind, theirs.kind) != (CfaKind.REGISTER, CfaKind.REGISTER) or mine.deref or theirs.deref \
            or (mine.register, mine.offset) != (theirs.register, theirs.offset):
        return False
    ra, other = row.registers.get(arch.ra), applied.registers.get(arch.ra)
    return ra is not None and other is not None and ra.kind == other.kind == RuleKind.OFFSET \
        and ra.offset == other.offset


def debugger_function_start(ctx, lookup) -> Optional[int]:
    """The start of the function holding lookup as the debugger knows it: its symbol (debug
    information, or the file's symbol tables: GDB's minimal symbols), or None."""
    found = ctx.symbol(lookup)
    if found is not None:
        return found[1]
    module = ctx.modules.find(lookup)
    if module is None:
        return None
    from plugin.file_targets.elf import symbol_in
    found = symbol_in(_file_symbols(module), lookup)
    return found[1] if found is not None else None


def _file_symbols(module):
    table = module.cache.get(SYMBOLS_CACHE_KEY)
    if table is None:
        table = ([], [])
        if module.path and module.format == ModuleFormat.ELF:
            from elftools.common.exceptions import ELFError
            from elftools.elf.elffile import ELFFile
            from plugin.file_targets.elf import function_table   # .symtab, else .dynsym
            try:
                with open(module.path, "rb") as handle:
                    table = function_table(ELFFile(handle), module.load_bias)
            except (OSError, ELFError, ValueError):
                pass
        module.cache[SYMBOLS_CACHE_KEY] = table
    return table


def _hex(value):
    return "?" if value is None else "0x%x" % value
