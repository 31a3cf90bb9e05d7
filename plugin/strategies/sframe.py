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

from plugin.errors import DecodeError, MemoryReadError
from plugin.model.evidence import StepEvidence
from plugin.formats import sframe
from plugin.modules import region_of
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
        self._section = None
        self._loaded = False
        self._rows = {}         # lookup pc -> (index, fde, fre, Row) or None
        self._described = {}    # (FDE index, FRE index) -> (entry, notes): the evidence that never changes

    @property
    def location(self):
        return self.module.tables.get(SECTION)

    def section(self):
        """The SFrameSection of this module, or None (no PT_GNU_SFRAME, or unreadable)."""
        if not self._loaded:
            self._loaded = True
            location = self.location
            if location is not None:
                try:
                    # The module's architecture wins over the header's ABI byte:
                    # register numbers must be the ones the debugger uses.
                    self._section = sframe.SFrameSection(region_of(self.target, location), self.module.arch)
                    if sframe.ABI_ARCH_NAMES.get(self._section.abi) != self.module.arch.name:
                        self.problems.append("%s: ABI %s does not match the module's architecture %s"
                                             % (SECTION, self._section.abi_name, self.module.arch.name))
                        self._section = None
                except (DecodeError, MemoryReadError) as exc:
                    self.note_problem(SECTION, exc)
                    self._section = None
        return self._section

    def row_for(self, pc):
        """(index, fde, fre, Row) in force at pc, or None; memoized (deep stacks repeat pcs).

        fre is None for a v3 FDE without FREs (an outermost frame). May raise
        DecodeError for a bad FDE or FRE.
        """
        if pc in self._rows:
            return self._rows[pc]
        section = self.section()
        hit = None
        if section is not None:
            found = section.find(pc)
            if found is not None:
                index, fde, fre = found
                hit = (index, fde, fre, section.row(fde, fre, pc))
        if len(self._rows) >= ROW_CACHE_SIZE:
            self._rows.clear()
        self._rows[pc] = hit
        return hit

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
    pc = ctx.lookup_pc(frame)
    module = ctx.modules.find(pc)
    if module is None:
        return Outcome.not_applicable(SOURCE, "no module contains 0x%x" % pc, FailureKind.NO_MODULE)
    tables = SFrameTables.of(module, ctx.target)
    try:
        section = tables.section()
        if section is None:
            reason = "%s has no .sframe (no PT_GNU_SFRAME program header)" % module.name
            if tables.problems:
                reason = "%s: %s" % (module.name, "; ".join(tables.problems))
            return Outcome.not_applicable(SOURCE, reason, tables.missing_kind(FailureKind.NO_TABLE))
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


# -- evidence: the FDE and FRE, and what each data word means ------------------

def entry_json(section, index, fde, fre, row, arch):
    """The FDE/FRE facts shown as evidence and by `unwind tables`."""
    entry = {
        "fde_index": index, "fde_offset": fde.offset, "start": fde.start, "end": fde.end,
        "version": section.version, "fde_type": fde.fde_type, "pc_type": fde.pc_type,
        "signal_frame": fde.signal_frame, "num_fres": fde.num_fres,
        "row_start": row.address, "row_end": row.end,
    }
    if fde.pc_type == "mask":
        entry["rep_size"] = section.repetition_size(fde)
    if fde.ra_mangled_key is not None:
        entry["pauth_key"] = fde.ra_mangled_key
    entry.update(fre_json(section, fde, fre, arch))
    entry["rules"] = rules_text(section, fde, fre, arch)
    return entry


def fre_json(section, fde, fre, arch):
    if fre is None:
        return {"fre_index": None, "fre_offset": None, "fre_start": fde.start, "fre_start_offset": 0,
                "cfa_base": None, "data_word_size": None, "data_words": [], "ra_mangled": False,
                "outermost": True}
    return {"fre_index": fre.index, "fre_offset": fre.offset, "fre_start": fre.start_address,
            "fre_start_offset": fre.start_offset, "cfa_base": _base_name(fre, arch),
            "data_word_size": fre.data_word_size,
            "data_words": [{"index": i, "value": w, "meaning": m}
                           for i, (w, m) in enumerate(zip(fre.words, word_meanings(section, fde, fre, arch)))],
            "ra_mangled": fre.ra_mangled, "outermost": fre.outermost}


def _base_name(fre, arch):
    return arch.name_of(fre.cfa.register) if fre.cfa is not None else fre.cfa_base


def rules_text(section, fde, fre, arch):
    """{"cfa", "fp", "ra"}: each rule spelled out, e.g. "CFA = *(rbp-16)"."""
    fp, ra = arch.name_of(arch.fp), arch.name_of(arch.ra)
    if fre is None or fre.outermost:
        return {"cfa": "CFA not described (outermost frame)", "fp": "%s not described" % fp,
                "ra": "%s undefined: outermost frame" % ra}
    cfa = fre.cfa
    out = {"cfa": "CFA = " + _value_text(cfa.register, cfa.offset, cfa.deref, arch)}
    if fre.fp is not None:
        out["fp"] = "%s = %s" % (fp, _slot_text(fre.fp, arch))
    elif section.fixed_fp_offset != 0:
        out["fp"] = "%s = *(CFA%+d) (fixed FP offset of the header)" % (fp, section.fixed_fp_offset)
    else:
        out["fp"] = "%s unchanged (not saved here)" % fp
    if fre.ra is not None:
        out["ra"] = "%s = %s" % (ra, _slot_text(fre.ra, arch))
    elif section.fixed_ra_offset != 0:
        out["ra"] = "%s = *(CFA%+d) (fixed RA offset of the header)" % (ra, section.fixed_ra_offset)
    else:
        out["ra"] = "%s unchanged: the return address is still in %s" % (ra, ra)
    if fre.ra_mangled:
        out["ra"] += ", signed: strip pointer authentication"
    return out


def _value_text(register, offset, deref, arch):
    core = "%s%+d" % (arch.name_of(register), offset)
    return "*(%s)" % core if deref else core


def _slot_text(rule, arch):
    if rule.base == "cfa":
        core = "CFA%+d" % rule.offset if rule.offset else "CFA"
        return "*(%s)" % core if rule.deref else core
    if not rule.deref and rule.offset == 0:
        return "%s (saved in that register)" % arch.name_of(rule.register)
    return _value_text(rule.register, rule.offset, rule.deref, arch)


def word_meanings(section, fde, fre, arch):
    """One phrase per data word of fre saying what the word is."""
    words = fre.words
    if not words:
        return []
    if fde.fde_type == "flex":
        return _flex_meanings(fre, words, arch)
    out = []
    base = "sp" if fre.cfa_base == "sp" else "fp"
    if section.abi == sframe.ABI_S390X_ENDIAN_BIG:
        out.append("CFA offset from %s, stored scaled: %d*%d%+d = %d" % (
            base, words[0], sframe.S390X_CFA_OFFSET_ALIGNMENT_FACTOR, -sframe.S390X_CFA_OFFSET_ADJUSTMENT,
            fre.cfa.offset))
    else:
        out.append("CFA offset from %s (%s): CFA = %s" % (
            base, arch.name_of(fre.cfa.register), _value_text(fre.cfa.register, fre.cfa.offset, False, arch)))
    if section.fixed_ra_offset == 0 and len(words) > len(out):
        if fre.ra_padding:
            out.append("padding: the return address is not saved (still in %s)" % arch.name_of(arch.ra))
        else:
            out.append("return address %s" % _saved_phrase(fre.ra, arch))
    if section.fixed_fp_offset == 0 and len(words) > len(out):
        out.append("frame pointer %s" % _saved_phrase(fre.fp, arch))
    while len(out) < len(words):
        out.append("unused")
    return out


def _saved_phrase(rule, arch):
    if rule is None:
        return "not saved"
    if rule.base == "cfa" and rule.deref:
        return "saved at CFA%+d" % rule.offset
    return "= " + _slot_text(rule, arch)


def _flex_meanings(fre, words, arch):
    mask = (1 << (8 * fre.data_word_size)) - 1
    out = []

    def pair(what, control):
        parts = []
        if control & 1:
            parts.append("base register %s" % arch.name_of(control >> 3))
        else:
            parts.append("base CFA")
        if control & 2:
            parts.append("dereferenced")
        return "%s control word 0x%x: %s" % (what, control, ", ".join(parts))

    out.append(pair("CFA", words[0] & mask))
    out.append("CFA offset: CFA = %s" % _value_text(fre.cfa.register, fre.cfa.offset, fre.cfa.deref, arch))
    i = 2
    if len(words) > i:
        if fre.ra_padding:
            out.append("padding: the return address keeps its default rule; the FP pair follows")
            i += 1
        elif len(words) > i + 1:
            out.append(pair("RA", words[i] & mask))
            out.append("RA offset: %s = %s" % (arch.name_of(arch.ra), _slot_text(fre.ra, arch)))
            i += 2
    if len(words) > i + 1:
        out.append(pair("FP", words[i] & mask))
        out.append("FP offset: %s = %s" % (arch.name_of(arch.fp), _slot_text(fre.fp, arch)))
        i += 2
    while len(out) < len(words):
        out.append("unused")
    return out


# -- `unwind tables`: every FDE and FRE, in the JSON shape of the CFI entries ----

def source_json(module, section, entries):
    """The {"kind": "sframe", ...} source of `unwind tables`."""
    return {"kind": "sframe", "module": module.name, "section": SECTION, "address": section.address,
            "found_by": module.tables[SECTION].found_by, "version": section.version,
            "abi": section.abi_name, "flags": section.flags,
            "fixed_fp_offset": section.fixed_fp_offset, "fixed_ra_offset": section.fixed_ra_offset,
            "lookup": section.lookup, "entries": entries}


def fde_table_json(section, index, fde, arch, address=None):
    """One FDE with its rows (all of them, or the one in force at address).

    rows[i], rows_text[i] and fres[i] describe the same FRE. A MASK FDE's
    rows are shown for its first repetition block unless an address says
    which block.
    """
    fres = section.fres(fde)
    if address is not None:
        found = section.find(address)
        if found is None or found[1] is not fde:
            chosen = []
        else:
            chosen = [found[2]]
    else:
        chosen = list(fres) if fres else ([None] if fde.outermost else [])
    rows, fre_out = [], []
    for fre in chosen:
        row = section.row(fde, fre, address)
        rows.append(row)
        item = fre_json(section, fde, fre, arch)
        item["rules"] = rules_text(section, fde, fre, arch)
        fre_out.append(item)
    entry = {"start": fde.start, "end": fde.end, "fde_index": index, "fde_offset": fde.offset,
             "fde_type": fde.fde_type, "pc_type": fde.pc_type, "signal_frame": fde.signal_frame,
             "num_fres": fde.num_fres, "outermost": fde.outermost,
             "rows": [r.to_json(arch) for r in rows], "rows_text": [r.text(arch) for r in rows],
             "fres": fre_out}
    if fde.pc_type == "mask":
        entry["rep_size"] = section.repetition_size(fde)
    if fde.ra_mangled_key is not None:
        entry["pauth_key"] = fde.ra_mangled_key
    return entry
