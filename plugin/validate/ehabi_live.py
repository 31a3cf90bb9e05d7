"""`unwind validate` live on 32-bit Arm: the .ARM.exidx entry's own row, judged where it claims to hold.

The walk's exidx strategy (plugin.strategies.exidx.step) checks an entry's
row against the code around an innermost pc and turns away where they
disagree, so the walk goes on from the code; judged through it, a wrong
`.save` or `.pad` would read as "not covered". Validation judges the table
itself, as the offline check does (plugin.validate.sources.exidx_rows):
the entry rule (CFA = sp, the return address in lr) at the function's
first instruction, the opcodes' row at its calls (EHABI opcodes describe
the body where it calls; plugin.validate.live.EXACT_ONLY_AT), and an
EXIDX_CANTUNWIND entry makes no claim ("not covered").

The adapter also asks here where a function starts and ends when only the
index says so (Debian's armhf programs have no .symtab and no CFI), and for
a decoder of the instruction set the function runs in (Thumb when CPSR.T).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from plugin.arch import arm
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import exidx
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import FailureKind, Outcome, error_kind
from plugin.strategies import exidx as strategy
from plugin.strategies.exidx import ExidxTables, at_entry, entry_json


def table_step(frame, ctx) -> Outcome:
    """The caller by the EHABI entry's own row at frame's pc (no check against the code)."""
    pc, tables = ExidxTables.for_frame(frame, ctx)
    if isinstance(tables, Outcome):
        return tables
    table = tables.table()
    if table is None:
        return tables.absent("no .ARM.exidx (no PT_ARM_EXIDX program header)")
    entry = table.find(pc)
    if entry is None or pc >= tables.end_of(entry):
        return Outcome.not_applicable(strategy.SOURCE, "no .ARM.exidx entry covers 0x%x" % pc, FailureKind.NO_ENTRY)
    if entry.kind == exidx.EntryKind.CANTUNWIND:
        return Outcome.not_applicable(strategy.SOURCE, "the .ARM.exidx entry %d for 0x%x says EXIDX_CANTUNWIND: "
                                      "it makes no claim" % (entry.index, entry.function), FailureKind.CANT_UNWIND)
    try:
        unwind, steps = tables.planned(entry, ctx.symbol)
    except DecodeError as exc:
        return Outcome.failed(strategy.SOURCE, "bad EHABI entry: %s" % exc, error_kind(exc))
    if steps is None or steps.refused:
        return Outcome.not_applicable(strategy.SOURCE, "entry %d has no opcodes to run (an unknown personality "
                                      "routine, or opcodes that refuse to unwind)" % entry.index,
                                      FailureKind.NOT_SUPPORTED)
    if pc == strategy.function_start(entry, ctx, pc):
        steps = at_entry(entry, ctx.arch, pc)
    evidence = StepEvidence(source=strategy.SOURCE, found_by=strategy.FOUND_BY, lookup_pc=pc,
                            module=tables.module.name, section=strategy.SECTION, section_address=table.address,
                            entry=entry_json(entry, unwind, steps, "binary search of the index"),
                            notes=list(steps.effects))
    return strategy.apply(steps, frame, ctx, evidence)


# Sources judged by their table's own row rather than by the walk's strategy.
TABLE_STEPS = {strategy.SOURCE: table_step}


def entry_range(target, modules, pc: int) -> Optional[Tuple[int, int]]:
    """(start, end) of the .ARM.exidx entry starting exactly at pc (any kind: a CANTUNWIND entry's
    start is a function's start too), or None."""
    module = modules.find(pc)
    if module is None or module.arch.name != "arm":
        return None
    try:
        tables = ExidxTables.of(module, target)
        table = tables.table()
        entry = table.find(pc) if table is not None else None
    except (DecodeError, MemoryReadError):
        return None
    if entry is None or entry.function & ~1 != pc:
        return None
    return pc, tables.end_of(entry)


def is_thumb(arch, registers: Dict[int, int]) -> bool:
    return arch.name == "arm" and bool(registers.get(arm.CPSR, 0) & arm.CPSR_THUMB)
