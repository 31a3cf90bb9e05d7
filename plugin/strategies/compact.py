"""The `compact` source: Apple compact unwind (__TEXT,__unwind_info).

Mach-O modules only; for any other module this source is not applicable
(the engine tries it before `cfi` for Mach-O modules, see
engine._sources_for). Per module, the __unwind_info found by
plugin/macho_modules.py is decoded from memory on first use and cached in
module.cache["compact"].

One 32-bit opcode covers a whole function and describes its body: after
the prologue has built the frame and before the epilogue tears it down.
Callers are always stopped at a call site, inside the body, so for them it
is exact. For the innermost frame (a breakpoint, a signal) it may be wrong
in the prologue or epilogue, and the evidence says so. Two places are
exact by the ABI whatever the opcode says, and are used instead (the
arch's entry_row and return table, plugin/arch/):
  * the function's first instruction: the return address was just pushed
    (x86: CFA = sp + word, RA = [CFA - word]) or is in the link register
    (arm64: CFA = sp, RA in x30);
  * a return instruction (x86 `ret`, `ret imm16`, `rep ret`; arm64 `ret`,
    `retaa`, `retab`): the frame is gone and the same holds. This one is
    also used over a DWARF escape's FDE, whose rows miss the epilogue
    where the compiler wrote no epilogue CFI (clang
    for Darwin arm64).

A DWARF-mode opcode names an FDE in __TEXT,__eh_frame by its offset; that
FDE is decoded directly (no search) and its row at the pc is used: a row
per instruction range, as exact as the CFI the compiler wrote. STACK_IND opcodes give the offset of the
prologue's `sub $imm32, %rsp` immediate; it is read from the function's code
through the Target.
"""

from dataclasses import replace

from plugin.arch import reader
from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.model.evidence import StepEvidence
from plugin.formats import cfi
from plugin.formats import compact_unwind as cu
from plugin.modules import region_of
from plugin.modules.module import ModuleFormat
from plugin.model.outcome import FailureKind, Outcome, error_kind
from plugin.strategies import ModuleTables
from plugin.strategies.cfi import CfiTables
from plugin.strategies.row_step import step_with_row

SOURCE = "compact"
SECTION = "__unwind_info"


class CompactTables(ModuleTables):
    """A Mach-O module's __unwind_info (and, for DWARF escapes, its __eh_frame)."""
    SOURCE = SOURCE

    def unwind_info(self):
        """The decoded UnwindInfo, or None when the module has none or it is unreadable."""
        return self.once(SECTION, self._load, errors=(DecodeError,))

    def _load(self):
        location = self.module.tables.get(SECTION)
        if location is None:
            return None
        # Function offsets count from the image base, the run-time address of __TEXT, where the header is.
        return cu.UnwindInfo(region_of(self.target, location), self.module.arch, self.module.header_address)

    def eh_frame(self):
        """The module's __eh_frame as a CfiSection, shared with the `cfi` source."""
        return CfiTables.of(self.module, self.target).eh_frame()

    def read_code(self, address, size):
        """Code bytes for STACK_IND, only from this module's executable segments."""
        if not (self.module.is_executable(address) and self.module.is_executable(address + size - 1)):
            raise MemoryReadError(address, size, "not in an executable segment of %s" % self.module.name)
        return self.target.read_memory(address, size)

    def entries(self):
        """Every cu.Entry in address order (zero-length ones dropped, as lookup() does)."""
        ui = self.unwind_info()
        return ui.entry_records() if ui is not None else []

    def dwarf_fde(self, decoded):
        """The __eh_frame FDE a DWARF-mode opcode points at; DecodeError if there is none."""
        section = self.eh_frame()
        if section is None:
            why = "; ".join(CfiTables.of(self.module, self.target).problems)
            raise DecodeError(SECTION, None, "opcode 0x%08x escapes to __eh_frame+0x%x, but the module "
                              "has no readable __eh_frame%s" % (decoded.encoding, decoded.dwarf_offset,
                                                                " (%s)" % why if why else ""), DecodeKind.ABSENT)
        return section, section.fde_at(decoded.dwarf_offset)


def entry_row(arch, pc):
    """The arch's rule where only the return address is on the stack (a
    function's first instruction, a return instruction), for one instruction."""
    return replace(arch.entry_row(pc), end=pc + arch.min_instruction_size)


def _function_start(ctx, pc, entry, decoded):
    """Is pc the first instruction of a function? The entry's start, unless
    the opcode says it is not a function start; the linker folds neighbours
    with one opcode into one entry, so a symbol's start counts too."""
    if pc == entry.function_start and decoded.function_start:
        return True
    lookup = getattr(ctx, "symbol", None) or ctx.target.symbol     # the context caches lookups
    try:
        found = lookup(pc)
    except Exception:           # symbols only help; a failed lookup means "not known"
        found = None
    return bool(found) and found[1] == pc


def step(frame, ctx):
    """Recover frame's caller from the compact opcode covering its lookup pc."""
    pc = ctx.lookup_pc(frame)
    module = ctx.modules.find(pc)
    if module is None:
        return Outcome.not_applicable(SOURCE, "no module contains 0x%x" % pc, FailureKind.NO_MODULE)
    if module.format != ModuleFormat.MACHO:
        return Outcome.not_applicable(SOURCE, "%s is not a Mach-O module: compact unwind is Mach-O only"
                                      % module.name, FailureKind.NOT_SUPPORTED)
    tables = CompactTables.of(module, ctx.target)
    try:
        ui = tables.unwind_info()
        if ui is None:
            reason = "%s has no %s" % (module.name, SECTION)
            if tables.problems:
                reason += " (%s)" % "; ".join(tables.problems)
            return Outcome.not_applicable(SOURCE, reason, tables.missing_kind(FailureKind.NO_TABLE))
        entry = ui.lookup(pc)
        if entry is None:
            return Outcome.not_applicable(SOURCE, "no %s entry of %s covers 0x%x"
                                          % (SECTION, module.name, pc), FailureKind.NO_ENTRY)
        decoded = ui.decode(entry)
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "bad compact unwind in %s: %s" % (module.name, exc), error_kind(exc))
    arch = ctx.arch
    evidence = StepEvidence(
        source=SOURCE, found_by="%s compact unwind" % SECTION, lookup_pc=pc, module=module.name,
        section=SECTION, section_address=ui.region.address,
        entry={"start": entry.function_start, "end": entry.function_end, "encoding": entry.encoding,
               "mode": decoded.mode, "decoded": decoded.text, "page": entry.page_index,
               "page_entry": entry.entry_index})
    opcode = "compact unwind opcode 0x%08x (%s) for [0x%x, 0x%x)" % (
        entry.encoding, decoded.text, entry.function_start, entry.function_end)
    if decoded.mode == "NONE":
        return Outcome.not_applicable(SOURCE, "%s: no unwind information" % opcode, FailureKind.NO_ENTRY)
    if decoded.mode == "UNKNOWN":
        return Outcome.failed(SOURCE, "%s: mode not known for %s" % (opcode, arch.name), FailureKind.NOT_SUPPORTED,
                              evidence)
    where = None
    if frame.exact_pc and arch.entry_row(pc) is not None:
        # A DWARF escape's FDE is exact at the entry; at a return it is not
        # always (clang on Darwin arm64 writes no epilogue CFI).
        if decoded.mode != "DWARF" and _function_start(ctx, pc, entry, decoded):
            where = "entry"
        elif arch.return_at(reader(ctx.read_memory), pc):
            where = "return"
    if decoded.mode == "DWARF" and not where:
        return _dwarf_escape(frame, ctx, tables, entry, decoded, evidence, opcode)
    if where:
        evidence.found_by = "%s compact unwind, ABI rule at %s" % (SECTION, where)
        evidence.notes.append("%s; pc 0x%x is %s: only the return address is on the stack there, so the "
                              "ABI's rule is used instead of the opcode, which describes the function's body"
                              % (opcode, pc, "the function's first instruction" if where == "entry"
                                 else "a return instruction"))
        return step_with_row(entry_row(arch, pc), frame, ctx, evidence)
    try:
        row = ui.row(entry, read_code=tables.read_code)
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "%s: %s" % (opcode, exc), error_kind(exc), evidence)
    if decoded.mode == "STACK_IND":
        size = row.cfa.offset
        evidence.entry["stack_size"] = size
        evidence.notes.append("STACK_IND: the stack size %d is the `sub $0x%x, %%%s` immediate read from the "
                              "code at 0x%x, plus %d" % (size, size - decoded.stack_adjust,
                                                         arch.name_of(arch.sp),
                                                         entry.function_start + decoded.sub_offset,
                                                         decoded.stack_adjust))
    if frame.exact_pc:
        where = ("this frame was stopped at 0x%x, which may be in the prologue or epilogue, where the "
                 "opcode is not exact" % pc)
    else:
        where = ("this frame's pc is a return address, so 0x%x is a call site, in the body, where it is "
                 "exact" % pc)
    evidence.notes.append("%s; one opcode covers the whole function from 0x%x and describes its body "
                          "(prologue and epilogue are not exact): %s" % (opcode, entry.function_start, where))
    return step_with_row(row, frame, ctx, evidence)


def _dwarf_escape(frame, ctx, tables, entry, decoded, evidence, opcode):
    pc = evidence.lookup_pc
    try:
        section, fde = tables.dwarf_fde(decoded)
        if not fde.start <= pc < fde.end:
            raise DecodeError(section.name, decoded.dwarf_offset,
                              "the FDE covers [0x%x, 0x%x), not 0x%x" % (fde.start, fde.end, pc),
                              DecodeKind.MALFORMED)
        row = cfi.row_at(fde, pc, ctx.arch)
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "%s: %s" % (opcode, exc), error_kind(exc), evidence)
    evidence.found_by = "%s DWARF escape -> __eh_frame CFI" % SECTION
    evidence.entry.update({"fde_offset": fde.offset, "cie_offset": fde.cie.offset, "fde_start": fde.start,
                           "fde_end": fde.end, "eh_frame_address": section.region.address,
                           "row_start": row.address, "row_end": row.end})
    evidence.notes.append("compact unwind DWARF escape -> __eh_frame FDE at +0x%x (CIE at +0x%x), "
                          "covering [0x%x, 0x%x); its row in force at 0x%x is [0x%x, 0x%x)"
                          % (fde.offset, fde.cie.offset, fde.start, fde.end, pc, row.address,
                             row.end if row.end is not None else fde.end))
    return step_with_row(row, frame, ctx, evidence, signal_frame=fde.cie.signal_frame)
