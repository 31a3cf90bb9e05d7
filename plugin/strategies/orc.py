"""The `orc` source: the Linux kernel's ORC tables (x86-64), read from guest memory.

The kernel module (plugin.modules.kernel) says where the tables are; the
entry covering a pc is found by a binary search over `.orc_unwind_ip`
read a page at a time through this module's own page cache (the tables
never change while the kernel runs; over a slow gdbstub a search reads
about log2(count) / 1024 pages, never the whole 1.5 MB). The entry is
applied by plugin.formats.orc_rules, the kernel's unwind_next_frame:

- CALL: the return address at CFA-8, the caller's sp the CFA, its bp as
  bp_reg says. ORC tracks nothing else: the other callee-saved registers
  are unknown in the caller.
- REGS: a struct pt_regs at the CFA: every general register of the
  interrupted frame, its pc exact. REGS_PARTIAL: an iret frame: its pc
  (exact) and sp.
- an interrupted frame whose saved cs is user mode (cs & 3) ends the walk,
  as END_OF_STACK and UNDEFINED entries do: the outermost frame, with the
  entry as evidence.
- a pc in a dynamic ftrace trampoline (no module holds it: a copy of
  ftrace_caller's or ftrace_regs_caller's code) is looked up at the same
  offset in the code it copies, as the kernel's orc_ftrace_find does.
- SP_INDIRECT (the IRQ stack's top holds the task stack's sp) switches
  stacks: the evidence says so, and the engine's "CFA grows" check does
  not apply across it. Its CFA is read as the kernel's release says (v5.12
  moved the offset after the dereference: orc.sp_indirect_adds_after).
"""
from __future__ import annotations

from typing import Optional

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import orc, orc_rules
from plugin.model.evidence import StepEvidence
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome, error_kind
from plugin.modules.kernel import KERNEL_NAME, MODULE_AREA, ftrace_trampolines, orc_table, still_there
from plugin.modules.module import ModuleFormat
from plugin.memory import PageCache
from plugin.strategies import ModuleTables

SOURCE = "orc"
SECTION = ".orc_unwind"
# pt_regs' words (orc_rules.PT_REGS names) as x86-64 DWARF register numbers
DWARF = {"ax": 0, "dx": 1, "cx": 2, "bx": 3, "si": 4, "di": 5, "bp": 6, "sp": 7, "r8": 8, "r9": 9,
         "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15, "ip": 16}
ENDS = {orc_rules.Outcome.END_OF_STACK: "the entry marks the end of the stack",
        orc_rules.Outcome.USER_MODE: "user mode",
        orc_rules.Outcome.UNDEFINED: "the entry is undefined: the kernel's own unwinder stops here"}
FAILS = {orc_rules.Outcome.UNREADABLE: FailureKind.UNREADABLE_MEMORY,
         orc_rules.Outcome.UNKNOWN_REGISTER: FailureKind.UNKNOWN_REGISTER}


class OrcTables(ModuleTables):
    """The kernel's ORC table, located once per module and read through a page cache."""
    SOURCE = SOURCE

    def __init__(self, module, target):
        super().__init__(module, target)
        self._pages = PageCache(target.read_memory)
        self._facts = {}        # entry index -> (entry_json, its note, the next entry's ip): the tables never change
        self._trampolines = (None, [])      # (the target's stop count, the kernel's ftrace trampolines then)
        self._checked = (None, {})      # (the stop count, {a trampoline's start: still there at that stop?})

    def trampoline_at(self, pc):
        """The kernel's dynamic ftrace trampoline (Trampoline) holding pc, or None. Tracers come and go
        as the kernel runs: one found at an earlier stop is taken while its code still begins as the
        code it copies (a few bytes read once a stop); else ftrace's list is read again, once a stop."""
        stops = getattr(self.target, "stops", 0)
        found = _holding(self._trampolines[1], pc)
        if found is not None:
            if self._checked[0] != stops:
                self._checked = (stops, {})
            there = self._checked[1]
            if found.start not in there:
                there[found.start] = still_there(found, self.target.read_memory)    # often read already
            if there[found.start]:
                return found
        if self._trampolines[0] == stops:
            return None
        self._trampolines = (stops, ftrace_trampolines(self.module, self.target.read_exact))
        self._checked = (stops, {t.start: True for t in self._trampolines[1]})
        return _holding(self._trampolines[1], pc)

    def read(self, address: int, size: int) -> bytes:
        return self._pages.read(address, size)

    def table(self):
        """(OrcTable, LayoutFoundBy, notes), or None (no ORC tables, or unreadable)."""
        if SECTION not in self.module.tables:
            return None
        return self.once(SECTION, lambda: orc_table(self.module, self.read), errors=(DecodeError, MemoryReadError))


def summary(module, target):
    """The kernel's ORC table for `unwind modules`: {entries, layout, layout_by, release}, or a
    {problem} when it cannot be read; None for a module without ORC tables."""
    if SECTION not in module.tables:
        return None
    tables = OrcTables.of(module, target)
    loaded = tables.table()
    if loaded is None:
        return {"problem": "; ".join(tables.problems) or "unreadable"}
    table, found_by, notes = loaded
    return {"entries": table.count, "layout": table.layout.value, "layout_by": found_by.value,
            "release": module.cache.get("kernel release"), "notes": list(notes)}


def step(frame, ctx):
    """Recover frame's caller from the kernel's ORC entry covering its lookup pc."""
    pc, tables = OrcTables.for_frame(frame, ctx)
    moved = None
    if isinstance(tables, Outcome):
        moved = in_trampoline(pc, ctx)
        if moved is None:
            return tables
        pc, tables = moved[0], moved[1]
    module = tables.module
    try:
        loaded = tables.table()
        if loaded is None:
            return tables.absent("no ORC tables (.orc_unwind_ip, .orc_unwind)")
        table, found_by, layout_notes = loaded
        index = table.find(pc)
        entry = None if index is None else table.entry(index)
    except (DecodeError, MemoryReadError) as exc:
        return Outcome.failed(SOURCE, "bad ORC table in %s: %s" % (module.name, exc), error_kind(exc))
    if entry is None:
        return Outcome.not_applicable(SOURCE, "no ORC entry of %s at or below 0x%x" % (module.name, pc),
                                      FailureKind.NO_ENTRY)
    arch = ctx.arch
    regs = frame.registers
    # the other bases only where the entry takes the CFA from one (each is a register read in GDB)
    base = orc_rules.OTHER_BASES.get(entry.sp_reg)
    others = {base: regs[DWARF[base]]} if base is not None and DWARF[base] in regs else {}
    start = orc_rules.Frame(regs.get(arch.pc, frame.pc), regs.get(arch.sp, 0), regs.get(arch.fp, 0),
                            exact=frame.exact_pc, others=others)
    if arch.sp not in regs or (arch.fp not in regs and entry.bp_reg == orc.OrcReg.BP):
        missing = "rsp" if arch.sp not in regs else "rbp"
        return Outcome.failed(SOURCE, "%s is not known in this frame" % missing, FailureKind.UNKNOWN_REGISTER)
    added_after = orc.sp_indirect_adds_after(module.cache.get("kernel release"))
    result = orc_rules.apply(entry, start, orc_rules.word_reader(ctx.read_memory), added_after)
    evidence = _evidence(entry, tables, pc, result, arch, added_after)
    if moved is not None:
        evidence.notes.insert(0, moved[2])
        evidence.rule = OrcRule(entry, evidence.rule.end, added_after=added_after)     # no plan: a trampoline lasts no longer than a stop
    if result.outcome in ENDS:
        evidence.notes.append(result.reason)
        return Outcome(AttemptStatus.RECOVERED, SOURCE, "ORC entry %d (%s): %s"
                       % (entry.index, orc.entry_text(entry, added_after), result.reason),
                       evidence=evidence, outermost=True, signal_frame=False)
    if result.outcome in FAILS:
        return Outcome.failed(SOURCE, "ORC entry %d: %s" % (entry.index, result.reason),
                              FAILS[result.outcome], evidence=evidence)
    caller = result.caller
    registers = {arch.pc: caller.pc, arch.sp: caller.sp}
    if caller.bp is not None:
        registers[arch.fp] = caller.bp
    if result.outcome is orc_rules.Outcome.INTERRUPTED and entry.type is orc.OrcType.REGS:
        registers.update((DWARF[name], value) for name, value in caller.others.items() if name in DWARF)
        registers[arch.fp] = caller.bp
    evidence.caller_registers = dict(registers)
    evidence.notes.append(result.reason)
    interrupted = result.outcome is orc_rules.Outcome.INTERRUPTED
    return Outcome(AttemptStatus.RECOVERED, SOURCE, registers=registers, evidence=evidence,
                   signal_frame=interrupted or entry.signal)


def in_trampoline(pc, ctx):
    """(the pc in the code a dynamic ftrace trampoline copies, the kernel's OrcTables, a note) for a pc
    in one (the kernel's orc_ftrace_find), else None."""
    if not MODULE_AREA[0] <= pc < MODULE_AREA[1]:
        return None
    kernel = next((m for m in ctx.modules.all() if m.name == KERNEL_NAME and m.format == ModuleFormat.KERNEL), None)
    if kernel is None:
        return None
    tables = OrcTables.of(kernel, ctx.target)
    found = tables.trampoline_at(pc)
    if found is None:
        return None
    at = found.copied + pc - found.start
    return (at, tables, "0x%x is in a dynamic ftrace trampoline at 0x%x: looked up at 0x%x, the same offset in "
            "the code it copies (the kernel's orc_ftrace_find)" % (pc, found.start, at))


def _holding(trampolines, pc):
    return next((t for t in trampolines if t.start <= pc < t.start + t.size), None)


def _evidence(entry, tables, pc, result, arch, added_after=True):
    module = tables.module
    location = module.tables[SECTION]
    table, found_by, layout_notes = tables.table()
    facts = tables._facts.get(entry.index)
    if facts is None:
        if len(tables._facts) >= orc.MEMO_SIZE:
            tables._facts.clear()
        end = _next_ip(table, entry)
        facts = tables._facts[entry.index] = (entry_json(entry, table, found_by, location, added_after),
                                              "ORC entry %d at 0x%x: %s" % (entry.index, entry.ip,
                                                                             orc.entry_text(entry, added_after)),
                                              OrcRule(entry, end, plain_row(entry, end, arch, added_after), added_after))
    evidence = StepEvidence(
        source=SOURCE, found_by="ORC .orc_unwind", lookup_pc=pc, module=module.name, section=SECTION,
        section_address=location.address, entry=dict(facts[0]), arch=arch, cfa=result.cfa,
        notes=[facts[1]] + list(layout_notes))
    evidence.rule = facts[2]
    evidence.stack_switch = entry.sp_reg in (orc.OrcReg.SP_INDIRECT, orc.OrcReg.BP_INDIRECT) \
        or result.outcome is orc_rules.Outcome.INTERRUPTED
    return evidence


def _next_ip(table, entry):
    try:
        return table.ip(entry.index + 1) if entry.index + 1 < table.count else None
    except (MemoryReadError, OSError, ValueError):
        return None


def entry_json(entry, table, found_by, location, added_after: bool = True) -> dict:
    """The entry for explanations and JSON: its index, ip, type and rules, and how it was found;
    start: where the code it covers starts (its ip), the frame id's start in GDB."""
    return {"index": entry.index, "ip": entry.ip, "type": entry.type.value,
            "cfa": orc.reg_text(entry.sp_reg, entry.sp_offset, added_after),
            "bp": "unchanged" if entry.bp_reg == orc.OrcReg.UNDEFINED else orc.reg_text(entry.bp_reg, entry.bp_offset),
            "signal": entry.signal, "end": entry.end, "flags": entry.flags,
            "layout": table.layout.value, "layout_by": found_by.value, "entries": table.count,
            "found_via": "%s; binary search of %d ips" % (location.found_by, table.count), "start": entry.ip}


def plain_row(entry, end, arch, added_after: bool = True) -> Optional[Row]:
    """A CALL entry whose CFA is sp or bp plus an offset, or an indirect one (SP_INDIRECT: the word
    at sp plus the offset since v5.12, added_after, else the word at sp + offset, as orc_rules
    applies it; BP_INDIRECT: the word at bp + offset), and
    whose bp is unchanged or saved at the CFA, as the Row it amounts to (rip = [CFA-8], rsp = CFA,
    rbp = [CFA+offset]): what a per-pc plan replays (plugin/plans.py). None for every other entry
    (pt_regs, the end of the stack, a CALL entry an exception left: exact pc)."""
    cfa = _plain_cfa(entry, arch, added_after)
    if entry.type is not orc.OrcType.CALL or entry.signal or cfa is None \
            or entry.bp_reg not in (orc.OrcReg.UNDEFINED, orc.OrcReg.PREV_SP):
        return None
    registers = {arch.pc: Rule(RuleKind.OFFSET, offset=-8)}
    if entry.bp_reg == orc.OrcReg.PREV_SP:
        registers[arch.fp] = Rule(RuleKind.OFFSET, offset=entry.bp_offset)
    return Row(entry.ip, cfa, registers, end)


def _plain_cfa(entry, arch, added_after) -> Optional[CfaRule]:
    reg, offset = entry.sp_reg, entry.sp_offset
    if reg in (orc.OrcReg.SP, orc.OrcReg.BP):
        return CfaRule(CfaKind.REGISTER, register=arch.sp if reg == orc.OrcReg.SP else arch.fp, offset=offset)
    if reg == orc.OrcReg.SP_INDIRECT and added_after:
        return CfaRule(CfaKind.REGISTER, register=arch.sp, deref=True, added=offset)
    if reg == orc.OrcReg.SP_INDIRECT:
        return CfaRule(CfaKind.REGISTER, register=arch.sp, offset=offset, deref=True)
    if reg == orc.OrcReg.BP_INDIRECT:
        return CfaRule(CfaKind.REGISTER, register=arch.fp, offset=offset, deref=True)
    return None


class OrcRule:
    """The entry as the evidence's rule: what `unwind explain` prints as the row in force; row: the
    Row a plain entry amounts to (plain_row), else None."""
    registers: dict = {}        # no CFI-like register rules (explain orders reads by them)

    def __init__(self, entry, end=None, row=None, added_after: bool = True):
        self.entry = entry
        self.address, self.end = entry.ip, end
        self.row = row
        self.added_after = added_after      # SP_INDIRECT as since v5.12 (orc.sp_indirect_adds_after)

    def text(self, arch=None) -> str:
        return "ORC %s" % orc.entry_text(self.entry, self.added_after)

    def to_json(self, arch=None) -> dict:
        return {"orc": orc.entry_text(self.entry, self.added_after), "type": self.entry.type.value}

    def rule_lines(self):
        """The CFA rule, then the type's rule (where the caller's pc and sp come from) and bp's."""
        entry = self.entry
        bp = "unchanged" if entry.bp_reg == orc.OrcReg.UNDEFINED else "[%s]" % orc.reg_text(entry.bp_reg,
                                                                                          entry.bp_offset)
        kind = {orc.OrcType.CALL: "rip = [CFA-8]   rsp = CFA",
                orc.OrcType.REGS: "struct pt_regs at CFA: every register of the interrupted frame, rip exact",
                orc.OrcType.REGS_PARTIAL: "iret frame at CFA: rip (exact) and rsp of the interrupted frame",
                }.get(entry.type, "%s: no caller" % entry.type.value)
        return ["CFA = " + orc.reg_text(entry.sp_reg, entry.sp_offset, self.added_after) + "   (ORC entry %d, type %s%s)"
                % (entry.index, entry.type.value, ", signal" if entry.signal else ""), kind, "rbp = " + bp]
