"""The `exidx` source: ARM EHABI (.ARM.exidx/.ARM.extab), found through PT_ARM_EXIDX.

An index entry gives, per function, unwind opcodes that move a virtual
stack pointer (vsp, starting at sp) and pop registers from where it
points. They are run here symbolically, once per entry: every value is a
callee register plus an offset, or a word loaded from such an address,
so the result is a plugin.model.rules.Row (CFA = the final vsp; each
popped register saved at CFA+n, or at an address a DWARF expression
computes when a `vsp = r[n]` came between) and the shared evaluator reads
the values. The caller's pc is the popped r15 if there was one, else its
r14 (the `finish` rule), with the Thumb bit cleared.

EHABI opcodes describe a function at its call sites, after its prologue.
At an exact pc (the innermost frame, a frame a signal interrupted) the
straight-line code around pc decides (checked_at): the opcodes' row where
the code agrees with it, the entry rule (CFA = sp, return address in lr)
where nothing is saved yet or all is popped before `bx lr`, else "not
known" (not applicable, kind not-at-call-site). VFP and iWMMXt
registers popped are skipped over, not tracked (the core's rules read
address-sized words), so those registers are unknown in the caller.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

from plugin.arch import arm, reader
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import exidx
from plugin.formats.exidx_ops import LR, SP
from plugin.memory import Region
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome, error_kind
from plugin.model.rules import CfaKind, RuleKind
from plugin.modules import region_of
from plugin.strategies import ModuleTables, sigframe
from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.strategies.exidx_plan import OpcodeRun, at_entry, plan  # noqa: F401 (plan: the module's API)

SOURCE = "exidx"
SECTION = exidx.INDEX_SECTION
FOUND_BY = ".ARM.exidx EHABI"


def function_start(entry: exidx.IndexEntry, ctx, pc: int) -> int:
    """Where the function holding pc starts: its symbol when it lies in the entry's range (the
    linker merges the identical index entries of adjacent functions), else the entry's start."""
    hit = ctx.symbol(pc)
    start = hit[1] & ~1 if hit and hit[1] is not None else None
    return start if start is not None and entry.function <= start <= pc else entry.function


def checked_at(steps: OpcodeRun, start: int, frame, ctx, pc: int):
    """The OpcodeRun for the innermost frame at pc, or a not-applicable Outcome.

    EHABI opcodes hold at call sites. The innermost frame may be stopped
    anywhere, so the straight-line code around pc decides (arm.code_facts):
    run from the function's start, the row's CFA must be the entry sp; run
    from pc through the next return, the sp after it must be the row's CFA.
    Where nothing is pushed yet, or all is popped before a `bx lr`, the entry
    rule holds instead; elsewhere the caller is not known from the table.
    """
    arch = ctx.arch
    cpsr = frame.registers.get(arm.CPSR)
    cfa = steps.row.cfa
    if cpsr is None or cfa.kind != CfaKind.REGISTER or cfa.deref:
        return replace(steps, effects=steps.effects + [
            "not checked against the code at 0x%x (%s): valid only if pc is past the prologue"
            % (pc, "CPSR unknown" if cpsr is None else "the CFA rule is not register+offset")])
    facts = arm.code_facts(reader(ctx.read_memory), start, pc, bool(cpsr & arm.CPSR_THUMB))
    if facts is None:
        return Outcome.failed(SOURCE, "the code of the function at 0x%x cannot be read to check the pc "
                              "0x%x is past its prologue" % (start, pc), FailureKind.UNREADABLE_MEMORY)
    row_cfa = (cfa.register, cfa.offset)
    if facts.prologue is not None:
        regs = facts.prologue
        base = arm.value(regs, cfa.register)
        saved = {n for n, rule in steps.row.registers.items() if rule.kind != RuleKind.SAME}
        if base is not None and (base[0], base[1] + cfa.offset) == (SP, 0) and saved <= facts.stored:
            return steps
        if arm.value(regs, SP) == (SP, 0) and arm.value(regs, LR) == (LR, 0):
            return at_entry(None, arch, pc, "the code from the function's start (0x%x) to pc 0x%x "
                            "pushes nothing and keeps %s" % (start, pc, arch.name_of(LR)))
        return Outcome.not_applicable(SOURCE, "pc 0x%x is in the prologue of the function at 0x%x: run from its "
                                      "start, the code does not yet give CFA = %s and the saves of the "
                                      "opcodes' rule; EHABI rows hold after the prologue, so the caller is "
                                      "not known from them"
                                      % (pc, start, steps.row.cfa.text(arch)), FailureKind.NOT_AT_CALL_SITE)
    if facts.epilogue is not None:
        after = arm.value(facts.epilogue, SP)
        if after == row_cfa or _number(after, frame) == _number(row_cfa, frame) is not None:
            return steps
        if facts.returns_by_lr and after == (SP, 0) and arm.value(facts.epilogue, LR) == (LR, 0):
            return at_entry(None, arch, pc, "from pc 0x%x the code returns by `bx lr` with nothing left "
                            "to pop" % pc)
        return Outcome.not_applicable(SOURCE, "pc 0x%x is in an epilogue of the function at 0x%x: run to the "
                                      "return, the code leaves sp at %s, not at the opcodes' CFA = %s; the "
                                      "caller is not known from them" % (
                                          pc, start, _symbol_text(after, arch),
                                          steps.row.cfa.text(arch)), FailureKind.NOT_AT_CALL_SITE)
    return steps


def _number(symbol, frame):
    """A symbolic (register, offset) of the current registers as a number, or None."""
    if symbol is None or frame.registers.get(symbol[0]) is None:
        return None
    return (frame.registers.get(symbol[0]) + symbol[1]) & 0xFFFFFFFF


def _symbol_text(symbol, arch):
    if symbol is None:
        return "a value not tracked"
    return "%s%+d" % (arch.name_of(symbol[0]), symbol[1]) if symbol[1] else arch.name_of(symbol[0])


# -- the module's tables -------------------------------------------------------

class ExidxTables(ModuleTables):
    """One module's .ARM.exidx, decoded on first use; plans cached per entry."""
    SOURCE = SOURCE

    def __init__(self, module, target):
        super().__init__(module, target)
        self._plans = {}            # entry index -> (UnwindEntry, OpcodeRun or None)

    def table(self):
        return self.once(SECTION, self._load, errors=(DecodeError, MemoryReadError))

    def _load(self):
        location = self.module.tables.get(SECTION)
        if location is None:
            return None
        if self.module.arch.name != "arm":
            self.problems.append("%s: the module's architecture is %s, not arm" % (SECTION, self.module.arch.name))
            return None
        return exidx.ExidxTable(region_of(self.target, location), self._extab_region)

    def _extab_region(self, address):
        """The module segment holding a table entry: .ARM.extab has no header of its own."""
        for seg in self.module.segments:
            if seg.start <= address < seg.end:
                return Region("%s (segment at 0x%x)" % (exidx.TABLE_SECTION, seg.start),
                              seg.start, seg.end - seg.start, self.target.read_memory)
        return None

    def end_of(self, entry):
        """Where entry's range ends: the next entry, else the end of its executable segment."""
        if entry.end is not None:
            return entry.end
        return self.module.segment_end(entry.function) or entry.function + 1

    def planned(self, entry, symbol):
        """(UnwindEntry, OpcodeRun or None) for entry; DecodeError for a bad one."""
        found = self._plans.get(entry.index)
        if found is None:
            def personality_name(address):
                hit = symbol(address & ~1)
                return hit[0] if hit and hit[1] == address & ~1 else None
            unwind = self.table().describe(entry, personality_name)
            steps = (plan(unwind, self.module.arch, entry.function, self.end_of(entry))
                     if unwind.decoded else None)
            found = self._plans[entry.index] = (unwind, steps)
        return found


    def unwindable(self, pc, symbol) -> Optional[exidx.IndexEntry]:
        """The entry covering pc if its opcodes can be run (not EXIDX_CANTUNWIND, decoded,
        no refusal), else None: what GDB's own EHABI unwinder can use at a call site."""
        table = self.table()
        entry = table.find(pc) if table is not None else None
        if entry is None or pc >= self.end_of(entry) or entry.kind == exidx.EntryKind.CANTUNWIND:
            return None
        try:
            _, steps = self.planned(entry, symbol)
        except DecodeError:
            return None
        return entry if steps is not None and not steps.refused else None


# -- the step ------------------------------------------------------------------

def step(frame, ctx) -> Outcome:
    """Recover frame's caller from the EHABI entry covering its lookup pc."""
    pc, tables = ExidxTables.for_frame(frame, ctx)
    if isinstance(tables, Outcome):
        return tables
    module = tables.module
    table = tables.table()
    if table is None:
        return tables.absent("no .ARM.exidx (no PT_ARM_EXIDX program header)")
    entry = table.find(pc)
    if entry is None or pc >= tables.end_of(entry):
        return Outcome.not_applicable(SOURCE, "no .ARM.exidx entry of %s covers 0x%x" % (module.name, pc), FailureKind.NO_ENTRY)
    if entry.kind == exidx.EntryKind.CANTUNWIND:      # an entry, but no rule: the code must say (analysis)
        return Outcome.failed(SOURCE, "the .ARM.exidx entry %d for 0x%x says EXIDX_CANTUNWIND: the table marks "
                              "the function as not unwindable by exceptions, so its code decides"
                              % (entry.index, entry.function), FailureKind.CANT_UNWIND)
    try:
        unwind, steps = tables.planned(entry, ctx.symbol)
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "bad EHABI entry in %s: %s" % (module.name, exc), error_kind(exc))
    if steps is None:
        return Outcome.not_applicable(SOURCE, "the .ARM.extab entry at 0x%x names personality routine 0x%x, "
                                      "whose data layout is not known" % (entry.table, unwind.personality),
                                      FailureKind.NOT_SUPPORTED)
    if steps.refused:
        return Outcome.not_applicable(SOURCE, "the opcodes of entry %d refuse to unwind" % entry.index,
                                      FailureKind.NO_RETURN_ADDRESS)
    start = function_start(entry, ctx, pc) if frame.exact_pc else entry.function
    if frame.exact_pc and pc == start:
        steps = at_entry(entry, module.arch, pc, None if start == entry.function else
                         "the pc is the first instruction of the function at 0x%x (from symbols; the linker "
                         "merged its index entry with the one at 0x%x)" % (start, entry.function))
    elif frame.exact_pc:
        steps = checked_at(steps, start, frame, ctx, pc)
        if isinstance(steps, Outcome):
            return steps
    evidence = StepEvidence(source=SOURCE, found_by=FOUND_BY, lookup_pc=pc, module=module.name,
                            section=SECTION, section_address=table.address,
                            entry=entry_json(entry, unwind, steps, "binary search of the index"),
                            notes=list(steps.effects))
    outcome = apply(steps, frame, ctx, evidence)
    trampoline = sigframe.at_trampoline(frame, ctx)
    if outcome.status == AttemptStatus.RECOVERED and trampoline is not None:
        # glibc's restorers carry entries (`.save {r0-r15}` over the sigcontext): the caller is the
        # interrupted frame, at its exact pc, and its stack may be another (sigaltstack)
        outcome.signal_frame = True
        evidence.notes.append("signal trampoline: %s" % trampoline.why)
    return outcome


def apply(steps: OpcodeRun, frame, ctx, evidence: StepEvidence) -> Outcome:
    """The caller's registers from an OpcodeRun: the row evaluated, pc from r15 or r14."""
    arch = ctx.arch
    evidence.rule = steps.row
    evidence.arch = arch
    try:
        result = evaluate_row(steps.row, arch, frame.registers, ctx.read_memory)
    except RowError as exc:
        evidence.reads = exc.reads
        return Outcome.failed(SOURCE, exc.reason, exc.kind, evidence=evidence)
    evidence.cfa = result.cfa
    evidence.reads = result.reads
    caller = result.registers
    ra = caller.get(steps.pc_from)
    if ra is None:
        return Outcome.failed(SOURCE, "the opcodes give no value for %s, the return address"
                              % arch.name_of(steps.pc_from), FailureKind.NO_RETURN_ADDRESS, evidence=evidence)
    if ra & 1:
        evidence.notes.append("return address 0x%x has bit 0 set: the caller runs Thumb code" % ra)
    caller[arch.pc] = arch.return_to(ra, frame.registers, caller)
    if steps.skipped:
        evidence.notes.append("popped but not tracked: %s" % "; ".join(steps.skipped))
    evidence.caller_registers = caller
    return Outcome(AttemptStatus.RECOVERED, SOURCE, registers=caller, evidence=evidence)


# -- evidence and `unwind tables` -----------------------------------------------

def entry_json(entry: exidx.IndexEntry, unwind: exidx.UnwindEntry, steps: Optional[OpcodeRun],
               found_via: Optional[str] = None, end: Optional[int] = None) -> dict:
    """The index entry, where its opcodes live, and each instruction with what it did.
    `end`: where the entry's range ends when there is no OpcodeRun (ExidxTables.end_of: the
    last entry of the index has no next entry to end it)."""
    out = {"index": entry.index, "index_offset": entry.offset, "start": entry.function,
           "end": steps.row.end if steps else (entry.end if end is None else end), "kind": entry.kind.value,
           "word": entry.word, "table_address": entry.table,
           "model": unwind.model.value if unwind.model else None,
           "personality_index": unwind.personality_index, "personality_name": unwind.personality_name,
           "personality": unwind.personality, "opcodes_at": unwind.opcodes_at,
           "opcode_words": unwind.opcode_words, "opcodes": unwind.opcodes.hex(), "lsda": unwind.lsda,
           "decoded": unwind.decoded}
    effects = steps.effects if steps else []
    out["instructions"] = [{"position": ins.position, "bytes": ins.raw.hex(), "text": ins.text(),
                            "effect": effects[i] if i < len(effects) else "not reached"}
                           for i, ins in enumerate(unwind.instructions)]
    if found_via:
        out["found_via"] = "PT_ARM_EXIDX, " + found_via
    return out


def table_sources(target, module, address: Optional[int], problems: List[str]) -> List[dict]:
    """[{"kind": "exidx", ...}] for a module's .ARM.exidx: every entry, or the one covering address."""
    tables = ExidxTables.of(module, target)
    table = tables.table()
    problems.extend("%s %s" % (module.name, p) for p in tables.problems)
    if table is None:
        return []
    if address is None:
        chosen = table.entries()
    else:
        hit = table.find(address)
        chosen = [hit] if hit is not None and address < tables.end_of(hit) else []
        if not chosen:
            return []
    entries = []
    for entry in chosen:
        item = {"start": entry.function, "end": tables.end_of(entry), "kind": entry.kind.value,
                "rows": [], "rows_text": []}
        if entry.kind != exidx.EntryKind.CANTUNWIND:
            try:
                unwind, steps = tables.planned(entry, target.symbol)
            except DecodeError as exc:
                item["error"] = str(exc)
                problems.append("%s %s entry %d: %s" % (module.name, SECTION, entry.index, exc))
            else:
                item.update(entry_json(entry, unwind, steps, end=item["end"]))
                if steps is not None:
                    item["rows"] = [steps.row.to_json(module.arch)]
                    item["rows_text"] = [steps.row.text(module.arch)]
        entries.append(item)
    return [{"kind": "exidx", "module": module.name, "section": SECTION, "address": table.address,
             "found_by": module.tables[SECTION].found_by, "entries": entries}]
