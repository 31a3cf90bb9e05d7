"""The `cfi` source: DWARF call frame information.

Per module: `.eh_frame_hdr` (found by PT_GNU_EH_FRAME) is binary-searched
for the FDE; `.eh_frame` is decoded from memory where eh_frame_ptr says (or,
with no header, where the file's section headers say: plugin/modules/on_disk.py);
without a usable header a sorted index of `.eh_frame` is built instead; and
`.debug_frame`, which the loader never maps, is read from the file on disk.
Where each section was found is kept in CfiTables.located(), not written
into the Module.
"""
from __future__ import annotations

from typing import NamedTuple

from plugin.cache import BoundedCache
from plugin.errors import DecodeError, DecodeKind
from plugin.model.evidence import StepEvidence
from plugin.model.rules import Row
from plugin.formats import cfi
from plugin.memory import Region
from plugin.modules import on_disk
from plugin.modules.module import ModuleFormat, TableLocation, region_of
from plugin.model.outcome import FailureKind, Outcome, error_kind
from plugin.strategies import ModuleTables
from plugin.strategies.row_step import step_with_row

SOURCE = "cfi"


class CfiHit(NamedTuple):
    """The FDE that covers a pc, from CfiTables.lookup."""
    section_name: str               # ".eh_frame", ".debug_frame", "__eh_frame"
    section: cfi.CfiSection
    fde: cfi.FDE
    found_via: str                  # e.g. ".eh_frame_hdr binary search"

    @property
    def signal_frame(self) -> bool:
        """Does the FDE's CIE mark a signal frame (augmentation 'S')?"""
        return self.fde.cie.signal_frame


class CfiRowHit(NamedTuple):
    """CfiHit plus the row in force at the pc, from CfiTables.row_for."""
    section_name: str
    section: cfi.CfiSection
    fde: cfi.FDE
    found_via: str
    row: Row


class CfiTables(ModuleTables):
    """The CFI sections of one module, decoded on first use and cached in module.cache."""
    SOURCE = SOURCE

    def __init__(self, module, target):
        super().__init__(module, target)
        self.rows = BoundedCache("CFI rows", ROW_CACHE_SIZE)     # lookup pc -> CfiRowHit
        self._located = {}      # section name -> TableLocation of .eh_frame / .debug_frame

    def _deref(self, address, size):
        return self.target.read_memory(address, size)

    def eh_frame_hdr(self) -> cfi.EhFrameHdr | None:
        def load():
            location = self.module.tables.get(".eh_frame_hdr")
            if location is None:
                return None
            return cfi.EhFrameHdr(region_of(self.target, location), self.module.arch, deref=self._deref)
        return self.once(".eh_frame_hdr", load)

    def eh_frame(self) -> cfi.CfiSection | None:
        def load():
            relocated = self._relocated(".eh_frame")
            if relocated is not None:
                return relocated
            hdr = self.eh_frame_hdr()
            if hdr is not None and hdr.eh_frame_ptr is not None:
                address, found_by = hdr.eh_frame_ptr, "eh_frame_ptr of .eh_frame_hdr"
                end = self.module.segment_end(address)
                if end is None:
                    raise DecodeError(".eh_frame_hdr", 4, "eh_frame_ptr 0x%x is outside the module" % address,
                                      DecodeKind.MALFORMED)
                size = end - address
                sized = on_disk.section_size_at(self.module, ".eh_frame", address)
                if sized is not None and sized <= size:
                    size, found_by = sized, found_by + ", sized by the file's section headers"
            elif self.module.format == ModuleFormat.MACHO:
                # The section header gives __TEXT,__eh_frame itself; there is no
                # header index, so lookup() builds the sorted one.
                location = self.module.tables.get("__eh_frame")
                if location is None:
                    return None
                region = Region("__eh_frame", location.address, location.size, self.target.read_memory,
                                self.module.arch.byteorder)
                return cfi.CfiSection(region, "eh_frame", self.module.arch, bases=self._bases(),
                                      deref=self._deref)
            else:
                location = on_disk.eh_frame_location(self.module)
                if location is None:
                    return None
                address, size, found_by = location.address, location.size, location.found_by
            self._located[".eh_frame"] = TableLocation(".eh_frame", address, size, found_by)
            region = Region(".eh_frame", address, size, self.target.read_memory, self.module.arch.byteorder)
            return cfi.CfiSection(region, "eh_frame", self.module.arch, bases=self._bases(),
                                  deref=self._deref)
        return self.once(".eh_frame", load)

    def debug_frame(self) -> cfi.CfiSection | None:
        def load():
            relocated = self._relocated(".debug_frame")
            if relocated is not None:
                return relocated
            found = on_disk.debug_frame(self.module)
            if found is None:
                return None
            location, data = found
            self._located[".debug_frame"] = location
            region = Region.from_bytes(".debug_frame", location.address, data, self.module.arch.byteorder)
            return cfi.CfiSection(region, "debug_frame", self.module.arch, bias=self.module.load_bias)
        return self.once(".debug_frame", load)

    def _relocated(self, name: str) -> cfi.CfiSection | None:
        """An object file's CFI section, relocated where the file target laid its sections out
        (plugin.file_targets.object_layout), or None."""
        if self.module.path is None or self.module.path != getattr(self.target, "path", None):
            return None
        found = getattr(self.target, "relocated_cfi", {}).get(name)
        if found is None:
            return None
        address, data, how = found
        self._located[name] = TableLocation(name, address, len(data), how, in_memory=name == ".eh_frame")
        region = Region.from_bytes(name, address, data, self.module.arch.byteorder)
        if name == ".eh_frame":
            return cfi.CfiSection(region, "eh_frame", self.module.arch, bases=self._bases(), deref=self._deref)
        return cfi.CfiSection(region, "debug_frame", self.module.arch, bias=self.module.load_bias)

    def _bases(self):
        bases = {}
        hdr = self.module.tables.get(".eh_frame_hdr")
        if hdr is not None:
            bases["data"] = hdr.address
        text = next((s for s in self.module.segments if s.executable), None)
        if text is not None:
            bases["text"] = text.start
        return bases

    def sections(self) -> list[tuple[str, cfi.CfiSection]]:
        """[(name, CfiSection)] for every CFI section this module has."""
        return [(sec.name, sec) for sec in (self.eh_frame(), self.debug_frame()) if sec is not None]

    def located(self) -> dict[str, TableLocation]:
        """Where .eh_frame and .debug_frame were found, beyond what module
        discovery put in module.tables (eh_frame_ptr, the file's section
        headers, the file on disk), in the order they were found. Locates
        them first (problems go to self.problems)."""
        self.sections()
        return dict(self._located)

    def lookup(self, pc: int) -> CfiHit | None:
        """The FDE covering pc, with its section and how it was found, or None."""
        eh_frame = self.eh_frame()
        if eh_frame is not None:
            hdr = self.eh_frame_hdr()
            if hdr is not None and hdr.usable:
                address = hdr.lookup(pc)
                if address is not None:
                    fde = eh_frame.fde_at(address - eh_frame.region.address)
                    if fde.start <= pc < fde.end:
                        return CfiHit(".eh_frame", eh_frame, fde, ".eh_frame_hdr binary search")
            else:
                fde = eh_frame.find_fde(pc)
                if fde is not None:
                    how = "sorted index of %s (no usable .eh_frame_hdr)" % eh_frame.name
                    return CfiHit(eh_frame.name, eh_frame, fde, how)
        debug_frame = self.debug_frame()
        if debug_frame is not None:
            fde = debug_frame.find_fde(pc)
            if fde is not None:
                return CfiHit(".debug_frame", debug_frame, fde, "sorted index of .debug_frame")
        return None

    def row_for(self, pc: int) -> CfiRowHit | None:
        """lookup(pc) plus the row in force at pc, memoized: deep stacks repeat pcs."""
        hit = self.rows.get(pc)
        if hit is None:
            found = self.lookup(pc)
            if found is None:
                return None
            hit = self.rows.put(pc, CfiRowHit(*found, cfi.row_at(found.fde, pc, self.module.arch)))
        return hit


ROW_CACHE_SIZE = 8192


def ra_column_problem(section, fde, arch) -> str:
    """Why an FDE whose CIE names another return-address column than the ABI's is
    not used: the caller's pc would be taken from a register that does not hold it."""
    return ("%s+0x%x: the CIE at +0x%x names return-address column %d (%s), not the ABI's %d (%s): "
            "refused" % (section.name, fde.offset, fde.cie.offset, fde.cie.ra_register,
                         arch.name_of(fde.cie.ra_register), arch.ra, arch.name_of(arch.ra)))


def step(frame, ctx) -> Outcome:
    """Recover frame's caller from the CFI row covering its lookup pc."""
    pc, tables = CfiTables.for_frame(frame, ctx)
    if isinstance(tables, Outcome):
        return tables
    module = tables.module
    try:
        hit = tables.row_for(pc)
        if hit is None:
            reason = "no FDE in %s covers 0x%x" % (module.name, pc)
            if tables.problems:
                reason += " (%s)" % "; ".join(tables.problems)
            return Outcome.not_applicable(SOURCE, reason, tables.missing_kind(FailureKind.NO_ENTRY))
        name, section, fde, how, row = hit.section_name, hit.section, hit.fde, hit.found_via, hit.row
    except DecodeError as exc:
        return Outcome.failed(SOURCE, "bad CFI in %s: %s" % (module.name, exc), error_kind(exc))
    if fde.cie.ra_register != module.arch.ra:
        return Outcome.failed(SOURCE, ra_column_problem(section, fde, module.arch), FailureKind.BAD_TABLE)
    evidence = StepEvidence(
        source=SOURCE, found_by="%s CFI" % name, lookup_pc=pc, module=module.name,
        section=name, section_address=section.region.address,
        entry={"fde_offset": fde.offset, "cie_offset": fde.cie.offset, "start": fde.start,
               "end": fde.end, "found_via": how, "augmentation": fde.cie.augmentation,
               "row_start": row.address, "row_end": row.end})
    if fde.cie.signal_frame:
        evidence.notes.append("the CIE has the 'S' augmentation: this is a signal frame, so the "
                              "caller's pc is the interrupted instruction itself")
    return step_with_row(row, frame, ctx, evidence, signal_frame=fde.cie.signal_frame)
