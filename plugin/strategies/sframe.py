"""The `sframe` source: SFrame (.sframe), found through PT_GNU_SFRAME.

SFrame describes, per address range of a function, only three things: how
to compute the CFA (SP or FP plus an offset; flex FDEs: any register, maybe
dereferenced), where the frame pointer was saved and where the return
address was saved. The section is decoded from the debuggee's memory (the
loader maps it with the text), once per module, and each FRE is turned into
a plugin.model.rules.Row so the shared step (row_step.step_with_row) applies it.

What SFrame does not describe is not guessed: the other callee-saved
registers (rbx, r12-r15; x19-x28) are left unknown in the caller instead of
being assumed unchanged, as a CFI row with no rule for them would say.
"""

from plugin.cache import BoundedCache
from plugin.errors import DecodeError, MemoryReadError
from plugin.model.evidence import StepEvidence
from plugin.model.rules import RuleKind
from plugin.formats import sframe
from plugin.modules import region_of
from plugin.strategies.sframe_entry import entry_json
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome, error_kind
from plugin.strategies import ModuleTables
from plugin.strategies.row_step import step_with_row

SOURCE = "sframe"
SECTION = ".sframe"
ROW_CACHE_SIZE = 8192


class SFrameTables(ModuleTables):
    """One module's .sframe, decoded on first use and cached in module.cache."""
    SOURCE = SOURCE

    def __init__(self, module, target):
        super().__init__(module, target)
        self.rows = BoundedCache("SFrame rows", ROW_CACHE_SIZE)  # lookup pc -> (index, fde, fre, Row) or None
        self._described = {}    # (FDE index, FRE index) -> (entry, notes): the evidence that never changes

    @property
    def location(self):
        return self.module.tables.get(SECTION)

    def section(self):
        """The SFrameSection of this module, or None (no PT_GNU_SFRAME, or unreadable)."""
        return self.once(SECTION, self._load, errors=(DecodeError, MemoryReadError))

    def _load(self):
        location = self.location
        if location is None:
            return None
        # The module's architecture wins over the header's ABI byte:
        # register numbers must be the ones the debugger uses.
        section = sframe.SFrameSection(region_of(self.target, location), self.module.arch)
        if sframe.ABI_ARCH_NAMES.get(section.abi) != self.module.arch.name:
            self.problems.append("%s: ABI %s does not match the module's architecture %s"
                                 % (SECTION, section.abi_name, self.module.arch.name))
            return None
        return None if self._breaks_abi(section) else section

    def _breaks_abi(self, section):
        """Refuse a header whose fixed RA offset contradicts the ABI: where a call
        leaves the return address on the stack (the ABI's entry row: CFA-8 on
        AMD64), the header must fix it there; 0 would take RA from a data word
        the ABI's FREs do not have (or leave the callee's own pc)."""
        arch = self.module.arch
        entry = arch.entry_row(0)
        rule = entry.registers.get(arch.ra) if entry is not None else None
        if rule is None or rule.kind != RuleKind.OFFSET or section.fixed_ra_offset == rule.offset:
            return False
        self.problems.append("%s: header refused: its fixed RA offset is %d, but on %s a call leaves the "
                             "return address at CFA%+d" % (SECTION, section.fixed_ra_offset,
                                                          arch.name, rule.offset))
        return True

    def row_for(self, pc):
        """(index, fde, fre, Row) in force at pc, or None; memoized (deep stacks repeat pcs).

        fre is None for a v3 FDE without FREs (an outermost frame). May raise
        DecodeError for a bad FDE or FRE.
        """
        return self.rows.lookup(pc, self._row_for, pc)

    def _row_for(self, pc):
        section = self.section()
        if section is not None:
            found = section.find(pc)
            if found is not None:
                index, fde, fre = found
                return index, fde, fre, section.row(fde, fre, pc)
        return None

    def described(self, index, fde, fre, row):
        """(entry, notes) for the evidence of this FDE and FRE, built once: deep stacks repeat them.

        row_start and row_end are left to the caller (a MASK FDE's range depends on the pc).
        """
        key = (index, None if fre is None else fre.index)
        found = self._described.get(key)
        if found is None:
            section, arch = self.section(), self.module.arch
            entry = entry_json(section, index, fde, fre, row, arch)
            entry["found_via"] = "PT_GNU_SFRAME, %s search of the FDE index" % section.lookup
            notes = ["data word %d = %d: %s" % (w["index"], w["value"], w["meaning"])
                     for w in entry["data_words"]]
            notes.extend("rule: " + entry["rules"][what] for what in ("cfa", "fp", "ra"))
            if fde.signal_frame:
                notes.append("the FDE has the signal-frame bit: this is a signal trampoline, so the "
                             "caller's pc is the interrupted instruction itself")
            if fre is not None:
                notes.extend(fre.notes)
            elif fde.outermost:
                notes.append("the FDE has no FREs: SFrame v3 marks an outermost frame so")
            found = self._described[key] = (entry, notes)
        return found


def step(frame, ctx):
    """Recover frame's caller from the SFrame FRE covering its lookup pc."""
    pc, tables = SFrameTables.for_frame(frame, ctx)
    if isinstance(tables, Outcome):
        return tables
    module = tables.module
    try:
        section = tables.section()
        if section is None:
            return tables.absent("no .sframe (no PT_GNU_SFRAME program header)")
        hit = tables.row_for(pc)
        if hit is None:
            covering = section.find_fde(pc)
            if covering is None:
                return Outcome.not_applicable(SOURCE, "no SFrame FDE in %s covers 0x%x" % (module.name, pc),
                                              FailureKind.NO_ENTRY)
            return Outcome.not_applicable(SOURCE, "SFrame FDE %d of %s covers 0x%x but no FRE starts at or "
                                          "before it" % (covering[0], module.name, pc), FailureKind.NO_ENTRY)
        index, fde, fre, row = hit
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "bad SFrame in %s: %s" % (module.name, exc), error_kind(exc))
    arch = ctx.arch
    entry, notes = tables.described(index, fde, fre, row)
    entry = dict(entry, row_start=row.address, row_end=row.end)
    evidence = StepEvidence(
        source=SOURCE, found_by=".sframe SFrame", lookup_pc=pc, module=module.name,
        section=SECTION, section_address=section.address, entry=entry, notes=list(notes))
    outcome = step_with_row(row, frame, ctx, evidence, signal_frame=fde.signal_frame)
    if outcome.status == AttemptStatus.RECOVERED and not outcome.outermost:
        _forget_untracked(outcome.registers, arch, evidence)
    return outcome


def _forget_untracked(caller, arch, evidence):
    """Drop callee-saved registers SFrame says nothing about (all but SP, FP, RA)."""
    keep = {arch.sp, arch.fp, arch.ra, arch.pc}
    dropped = [n for n in arch.callee_saved if n not in keep and n in caller]
    for number in dropped:
        del caller[number]
    if dropped:
        evidence.notes.append("SFrame tracks only CFA, FP and RA: %s are unknown in the caller"
                              % ", ".join(arch.name_of(n) for n in dropped))
