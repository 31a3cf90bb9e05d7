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

EHABI opcodes describe a function at its call sites, after its prologue:
at an exact pc (the innermost frame) on the function's first instruction
the entry rule (CFA = sp, return address in lr) is used instead; elsewhere
in a prologue or epilogue of the innermost frame they can be wrong, which
the engine's checks may catch but nothing here detects. VFP and iWMMXt
registers popped are skipped over, not tracked (the core's rules read
address-sized words), so those registers are unknown in the caller.
"""

from dataclasses import dataclass
from typing import List, Optional

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import exidx
from plugin.formats.exidx_ops import LR, PC, SP, OpKind
from plugin.memory import Region, encode_sleb
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome, error_kind
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.modules import region_of
from plugin.strategies import ModuleTables
from plugin.strategies.evaluate import UnwindError, evaluate_row

SOURCE = "exidx"
SECTION = exidx.INDEX_SECTION
FOUND_BY = ".ARM.exidx EHABI"
_DW_OP_BREG0, _DW_OP_DEREF, _DW_OP_CONSTS, _DW_OP_PLUS, _DW_OP_DROP = 0x70, 0x06, 0x11, 0x22, 0x13


@dataclass
class Plan:
    """An entry's opcodes run symbolically: the Row, and what each instruction did."""
    row: Row
    effects: List[str]              # one sentence per executed instruction
    pc_from: int                    # PC (popped) or LR (the finish rule)
    skipped: List[str]              # VFP/iWMMXt pops: stepped over, registers not tracked
    refused: bool                   # a "refuse to unwind" instruction was reached


# -- symbolic values: (base, offset); base is ("reg", n) or ("load", value) ----------

def _reg(n, offset=0):
    return (("reg", n), offset)


def _plus(value, k):
    return (value[0], value[1] + k)


def _text(value, arch):
    base, k = value
    core = arch.name_of(base[1]) if base[0] == "reg" else "[%s]" % _text(base[1], arch)
    return "%s%+d" % (core, k) if k else core


def _expression(value):
    base, k = value
    if base[0] == "reg" and base[1] < 32:
        return bytes([_DW_OP_BREG0 + base[1]]) + encode_sleb(k)
    out = _expression(base[1]) + bytes([_DW_OP_DEREF])
    if k:
        out += bytes([_DW_OP_CONSTS]) + encode_sleb(k) + bytes([_DW_OP_PLUS])
    return out


def plan(unwind: exidx.UnwindEntry, arch, start: int, end: int) -> Plan:
    """The Plan of a decoded UnwindEntry for the range [start, end)."""
    vsp = _reg(SP)
    saved = {}                      # core register -> address value it was popped from
    effects, skipped = [], []
    refused = False
    for ins in unwind.instructions:
        kind = ins.kind
        if kind == OpKind.FINISH:
            effects.append("finish: stop")
            break
        if kind == OpKind.REFUSE:
            refused = True
            effects.append("refuse to unwind")
            break
        if kind == OpKind.VSP_ADD:
            vsp = _plus(vsp, ins.amount)
            effects.append("vsp = %s" % _text(vsp, arch))
        elif kind == OpKind.VSP_SUB:
            vsp = _plus(vsp, -ins.amount)
            effects.append("vsp = %s" % _text(vsp, arch))
        elif kind == OpKind.VSP_FROM_REGISTER:
            n = ins.register
            vsp = (("load", saved[n]), 0) if n in saved else _reg(n)
            effects.append("vsp = %s = %s" % (arch.name_of(n), _text(vsp, arch)))
        elif kind == OpKind.POP:
            parts, slot = [], vsp
            for n in ins.registers:
                saved[n] = slot
                parts.append("%s from [%s]" % (arch.name_of(n), _text(slot, arch)))
                slot = _plus(slot, 4)
            vsp = (("load", saved[SP]), 0) if SP in ins.registers else slot
            effects.append("%s; vsp = %s" % (", ".join(parts), _text(vsp, arch)))
        else:
            skipped.append(ins.text())
            vsp = _plus(vsp, ins.amount)
            effects.append("%s skipped (not tracked): %d bytes; vsp = %s" % (ins.text(), ins.amount,
                                                                              _text(vsp, arch)))
    registers = {}
    for n, where in saved.items():
        if n == SP:
            continue                # the caller's sp is the CFA
        if where[0] == vsp[0]:
            registers[n] = Rule(RuleKind.OFFSET, offset=where[1] - vsp[1])
        else:
            registers[n] = Rule(RuleKind.EXPRESSION, expression=bytes([_DW_OP_DROP]) + _expression(where))
    registers.setdefault(LR, Rule(RuleKind.SAME))
    base, k = vsp
    if base[0] == "reg":
        cfa = CfaRule(CfaKind.REGISTER, register=base[1], offset=k)
    elif k == 0 and base[1][0][0] == "reg":
        cfa = CfaRule(CfaKind.REGISTER, register=base[1][0][1], offset=base[1][1], deref=True)
    else:
        cfa = CfaRule(CfaKind.EXPRESSION, expression=_expression(vsp))
    row = Row(address=start, cfa=cfa, registers=registers, end=end)
    return Plan(row, effects, PC if PC in saved else LR, skipped, refused)


def at_entry(entry: exidx.IndexEntry, arch) -> Plan:
    """The Plan at a function's first instruction, where its opcodes do not hold yet."""
    row = Row(address=entry.function, cfa=CfaRule(CfaKind.REGISTER, register=SP, offset=0),
              registers={LR: Rule(RuleKind.SAME)}, end=entry.function + 1)
    note = ("the pc is the function's first instruction: nothing is saved yet, so CFA = %s and "
            "the return address is in %s (the opcodes describe the body, after the prologue)"
            % (arch.name_of(SP), arch.name_of(LR)))
    return Plan(row, [note], LR, [], False)


# -- the module's tables -------------------------------------------------------

class ExidxTables(ModuleTables):
    """One module's .ARM.exidx, decoded on first use; plans cached per entry."""
    SOURCE = SOURCE

    def __init__(self, module, target):
        super().__init__(module, target)
        self._table = None
        self._loaded = False
        self._plans = {}            # entry index -> (UnwindEntry, Plan or None)

    def table(self):
        if not self._loaded:
            self._loaded = True
            location = self.module.tables.get(SECTION)
            if location is not None:
                if self.module.arch.name != "arm":
                    self.problems.append("%s: the module's architecture is %s, not arm"
                                         % (SECTION, self.module.arch.name))
                    return None
                try:
                    self._table = exidx.ExidxTable(region_of(self.target, location), self._extab_region)
                except (DecodeError, MemoryReadError) as exc:
                    self.note_problem(SECTION, exc)
        return self._table

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
        """(UnwindEntry, Plan or None) for entry; DecodeError for a bad one."""
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
    if entry.kind == exidx.EntryKind.CANTUNWIND:
        return Outcome.not_applicable(SOURCE, "the .ARM.exidx entry %d for 0x%x says EXIDX_CANTUNWIND"
                                      % (entry.index, entry.function), FailureKind.NO_ENTRY)
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
    if frame.exact_pc and pc == entry.function:
        steps = at_entry(entry, module.arch)
    evidence = StepEvidence(source=SOURCE, found_by=FOUND_BY, lookup_pc=pc, module=module.name,
                            section=SECTION, section_address=table.address,
                            entry=entry_json(entry, unwind, steps, "binary search of the index"),
                            notes=list(steps.effects))
    return apply(steps, frame, ctx, evidence)


def apply(steps: Plan, frame, ctx, evidence: StepEvidence) -> Outcome:
    """The caller's registers from a Plan: the row evaluated, pc from r15 or r14."""
    arch = ctx.arch
    evidence.rule = steps.row
    evidence.arch = arch
    try:
        result = evaluate_row(steps.row, arch, frame.registers, ctx.read_memory)
    except UnwindError as exc:
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

def entry_json(entry: exidx.IndexEntry, unwind: exidx.UnwindEntry, steps: Optional[Plan],
               found_via: Optional[str] = None) -> dict:
    """The index entry, where its opcodes live, and each instruction with what it did."""
    out = {"index": entry.index, "index_offset": entry.offset, "start": entry.function,
           "end": steps.row.end if steps else entry.end, "kind": entry.kind.value,
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
                item.update(entry_json(entry, unwind, steps))
                if steps is not None:
                    item["rows"] = [steps.row.to_json(module.arch)]
                    item["rows_text"] = [steps.row.text(module.arch)]
        entries.append(item)
    return [{"kind": "exidx", "module": module.name, "section": SECTION, "address": table.address,
             "found_by": module.tables[SECTION].found_by, "entries": entries}]


def entry_text(entry: dict) -> List[str]:
    """Lines for one entry of table_sources, for people."""
    head = "  [0x%x, 0x%x) %s" % (entry["start"], entry["end"], entry["kind"])
    if entry.get("model"):
        who = entry["personality_name"] or "personality 0x%x" % entry["personality"]
        head += ", %s model, %s, opcodes %s" % (entry["model"], who, entry["opcodes"] or "-")
    lines = [head]
    if "error" in entry:
        lines.append("    error: %s" % entry["error"])
    for ins in entry.get("instructions", ()):
        lines.append("    %-8s %-28s %s" % (ins["bytes"], ins["text"], ins["effect"]))
    for row_text in entry["rows_text"]:
        lines.append("    row: %s" % row_text)
    return lines
