"""Which frames GDB's own `bt` takes from the plugin: `set unwind claim auto|all|none`.

GDB's DWARF unwinder reads the same `.eh_frame` and `.debug_frame` as the
plugin, and a frame it builds is better than one a Python unwinder can hand
back (GDB 13 keeps a claimed frame's saved registers as values, not
locations: no "Saved registers" in `info frame`, no `set var` on a caller's
register-held variables, no tail-call frames built from DW_TAG_call_site).
So by default (`auto`) the plugin claims what it proves and GDB's own
unwinders do not give, and declines the rest:

- declined: every frame whose lookup pc lies in an FDE of those sections in
  a module GDB has loaded as an objfile; a frame where GDB's own prologue
  analyser gives the very caller the analysis proves (same pc, sp and
  registers: plugin.debugger_heuristic.same_as_debugger, kept per pc in
  GdbCoverage.heuristic); a guess (frame-pointer, scan) unless `set unwind
  guesses on`, and then still where GDB's heuristic gives another caller the
  checks accept (plugin.debugger_heuristic.yields_to_debugger);
- claimed: SFrame-only code, compact unwind, ARM EHABI where GDB's own EHABI
  unwinder does not apply (it reads .ARM.exidx of its objfiles, but trusts
  it only at call sites: not for the innermost frame nor a frame a signal
  interrupted), tables that exist only in memory or in a module GDB has no
  objfile for (JIT code; a core opened without its executable), rows whose
  return address is signed with pointer authentication on a target whose
  description has no `pauth` feature (GDB then keeps the signature in the
  address), trap handlers looked up at their exact pc, and code without
  tables read instruction by instruction where the analysis decided
  (settings.SourceKind.PROOF) and GDB's heuristic gives another caller.

Where none of these can occur (GdbCoverage.leaves_all_to_gdb: no source
that reads code or the stack), the unwinder declines every frame without
looking at it. `all` claims every frame the plugin can recover; `none`
claims nothing. `unwind backtrace/explain/compare` ignore this setting;
`unwind explain` says, for a frame GDB took from the plugin, its proof and
why GDB's own unwinders could not give it (why_claimed).
"""
from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Optional

import gdb

from plugin.arch import arm as arm_arch
from plugin.arch.base import reader
from plugin.cache import BoundedCache
from plugin.debugger_heuristic import debugger_function_start, modelled_answer
from plugin.settings import SourceKind, gdb_sections, is_fallback, kind_of
from plugin.strategies.analysis_forward import FORWARD
from plugin.strategies.cfi import CfiTables
from plugin.strategies.exidx import ExidxTables

from . import objfiles, sigtramp
from .levels import inline_depth

GDB_DWARF_SECTIONS = gdb_sections()    # the tables GDB's own DWARF unwinder reads (declared with their source)
GDB_TABLES = frozenset((".eh_frame_hdr",) + GDB_DWARF_SECTIONS)   # module.tables entries that lead only to them
# Architectures where a table GDB reads is a table GDB can use everywhere: not arm (GDB's EHABI
# unwinder skips the innermost frame), not aarch64 (return addresses signed with pointer
# authentication on a target without the pauth feature).
GDB_USES_ITS_TABLES = ("x86_64", "i386", "s390x")
VERDICT_CACHE_SIZE = 65536
PAUTH_REGISTER = "pauth_dmask"     # present exactly when the target description has the pauth feature


class Claim(str, Enum):
    AUTO = "auto"       # decline what GDB's DWARF unwinder covers from the same table
    ALL = "all"         # claim every frame the plugin recovers
    NONE = "none"       # claim nothing: GDB unwinds alone


# What a frame GDB's `bt` takes from the plugin loses there. GDB's Python unwinder API
# (py-unwind.c, GDB 13 to the 2024 sources) copies each register handed to it as bytes
# (frame_unwind_got_bytes), never as the location it was saved at.
CLAIMED_NOTE = ("claimed: GDB's bt takes this frame from the plugin (set unwind claim %s). GDB's Python "
                "unwinder API keeps the registers it restores as values, not the stack slots they were "
                "saved in: \"info frame\" in frame #%d lists no saved registers, a variable of frame #%d "
                "held in one of them cannot be assigned (set var), and GDB builds no tail-call frames "
                "(DW_TAG_call_site) and no @entry values on it.")


def claimed_note(claim, callee_level, level, why=""):
    """The note `unwind explain` adds to a frame GDB's bt took from the plugin; why: its proof
    and why GDB's own unwinders could not give it (why_claimed)."""
    note = CLAIMED_NOTE % (claim, callee_level, level)
    return note.replace(". ", ": %s. " % why, 1) if why else note


def why_claimed(claim, callee, frame, ctx, coverage) -> str:
    """The proof of the plugin's frame `frame` (found from `callee`, frames of the plugin's walk)
    and why GDB's own unwinders could not give it."""
    evidence = frame.evidence
    if evidence is None:
        return ""
    lookup = evidence.lookup_pc
    where = "%s of %s" % (evidence.section, evidence.module or "code outside every module")
    kind = kind_of(frame.method)
    if kind == SourceKind.PROOF and evidence.entry.get("start_by") == FORWARD:
        proof = "the proof is the code of %s read forward from the pc 0x%x on every path to its returns " \
                "(its start unknown), each rule set by the instruction named above" % (
                    evidence.entry.get("function") or "the function", lookup)
    elif kind == SourceKind.PROOF:
        proof = "the proof is the code of %s read on every path from its start 0x%x (%s), each rule set by " \
                "the instruction named above" % (evidence.entry.get("function") or "the function",
                                                  evidence.entry.get("start", lookup),
                                                  evidence.entry.get("start_by", "?"))
    elif kind == SourceKind.GUESS:
        proof = "a guess (%s), taken because \"set unwind guesses\" is on" % evidence.found_by
    else:
        proof = "the proof is the row of %s for 0x%x" % (where, lookup)
    if claim != Claim.AUTO.value:
        return "%s; GDB's own unwinders were not asked (set unwind claim %s)" % (proof, claim)
    module = ctx.modules.find(lookup)
    misread = sigtramp.gdb_misreads(ctx, callee.registers, callee.pc, frame.pc)
    if misread is not None:
        return "%s; %s" % (proof, misread)
    if ctx.trap_handler(callee.pc) is not None:
        gdb_cannot = "GDB looks frame #%d up at pc-1, but 0x%x is in a trap handler, entered by a planted " \
                     "return address (set unwind trap-handler-names)" % (callee.level, callee.pc)
    elif module is None:
        gdb_cannot = "0x%x is in no module (JIT code): GDB has no objfile and no table for it" % lookup
    elif not coverage.loaded_by_gdb(module):
        gdb_cannot = "GDB has no objfile for %s, so its DWARF unwinder reads no table there" % module.name
    elif kind == SourceKind.TABLE and evidence.section not in GDB_DWARF_SECTIONS:
        gdb_cannot = "GDB does not read %s" % evidence.section
    elif kind == SourceKind.TABLE:
        gdb_cannot = "the return address is signed and the target has no pauth feature: GDB would keep the " \
                     "signature in it"
    else:
        gdb_cannot = "no table GDB reads covers 0x%x" % lookup
    if kind != SourceKind.TABLE:
        gdb_cannot += ", and " + _heuristic_differs(callee, ctx)
    return "%s; %s" % (proof, gdb_cannot)


def _heuristic_differs(callee, ctx):
    model = modelled_answer(callee, ctx)
    if model is None:
        return "GDB's prologue analyser finds no caller here (or takes a path the plugin does not model)"
    arch = ctx.arch
    return "GDB's prologue analyser gives another caller, pc 0x%x sp 0x%x (%s)" % (
        model.registers.get(arch.pc) or 0, model.registers.get(arch.sp) or 0, model.evidence.found_by)


def arm_prologue_gives(frame, ctx) -> Optional[str]:
    """Under auto, a frame on arm that GDB's prologue analyser unwinds (no table GDB reads covers it
    there: the innermost frame, one a signal interrupted, or a call site without an EHABI entry GDB
    can use): where GDB knows the function's start (a symbol) and the code from there to pc (to the
    call, in a caller) is straight-line (no branch: pushes, stack adjustments, stores;
    plugin.arch.arm.code_facts), the analyser reads that same code and gives the caller the plugin
    gives. Why it is left to GDB, whose frame keeps the locations of the saved registers; None
    otherwise."""
    if ctx.arch.name != "arm":
        return None
    start, cpsr = debugger_function_start(ctx, ctx.lookup_pc(frame)), frame.registers.get(arm_arch.CPSR)
    if start is None or cpsr is None:
        return None
    read, start, thumb = reader(ctx.read_memory), start & ~1, bool(cpsr & arm_arch.CPSR_THUMB)
    ends = [frame.pc] if frame.exact_pc else \
        [frame.pc - size for size in (4, 2)] if ctx.arch.call_before(read, frame.pc) else []
    for end in ends:
        facts = arm_arch.code_facts(read, start, end, thumb) if start < end else None
        if facts is not None and facts.prologue is not None:
            return ("GDB's arm prologue analyser reads the same straight-line code from the function's start "
                    "0x%x (its symbol) to 0x%x: left to GDB, so its frame keeps the locations of the "
                    "registers it restores" % (start, end))
    return None


NOT_COVERED = (sys.maxsize, None)     # a caller verdict that never declines: no level is above it


class CallerVerdicts:
    """Under auto, per return address pc: (inline depth at pc, why GDB covers the caller frame
    there), or NOT_COVERED; the unwinder declines a caller frame from this and its pc alone,
    before anything else. Valid while the modules, the trap handler names and the gdb
    architecture stay (key: the cache's generation); pc_register reads that architecture's pc."""
    __slots__ = ("pc_register", "verdicts")

    def __init__(self):
        self.pc_register = None
        self.verdicts = BoundedCache("caller verdicts", VERDICT_CACHE_SIZE)

    @property
    def key(self):
        return self.verdicts.generation

    def reset(self, key, pc_register):
        self.pc_register = pc_register
        self.verdicts.for_generation(key)


def covered_caller(pc, ctx, pending_frame, inferior):
    """Under auto, (inline depth at pc, why GDB covers a caller frame at return address pc),
    or NOT_COVERED; kept in the inferior's CallerVerdicts for PluginUnwinder.__call__'s fast
    path. It is the slow path's verdict for a frame that is no innermost physical frame (level above the
    inline depth at pc) and no frame a signal interrupted: not in a trap handler, GDB covers
    pc-1, and pc-1 is in no signal trampoline."""
    target = ctx.target
    callers = inferior.coverage.callers
    key = (target.generation, target.trap_handler_names, target.gdb_arch)
    if key != callers.key:
        callers.reset(key, target.descriptors.get(ctx.arch.registers[ctx.arch.pc],
                                                  ctx.arch.registers[ctx.arch.pc]))
    verdict = callers.verdicts.get(pc)
    if verdict is not None:
        return verdict
    verdict = NOT_COVERED
    if ctx.trap_handler(pc) is None:
        coverage = inferior.coverage
        reason = coverage.gdb_covers(pc - 1, ctx, pending_frame, call_site=True)
        if reason is None:
            reason = coverage.heuristic.get((pc - 1, False))
        elif pc - 1 in coverage.signal_pcs:
            reason = None
        if reason is not None:
            verdict = (inline_depth(pc, inferior.inline_depths), reason)
    return callers.verdicts.put(pc, verdict)


class GdbCoverage:
    """Per inferior: the objfiles GDB loaded and whether the target strips pointer authentication."""

    def __init__(self):
        self.callers = CallerVerdicts()
        self._modules_verdict = None     # (ModuleMap generation, leaves_all_to_gdb's answer for the modules)
        self._loaded = None
        # For one module generation (GdbTarget.generation; _for_generation):
        self.covers = BoundedCache("GDB covers", VERDICT_CACHE_SIZE)     # lookup pc -> why GDB covers it, or None
        self.exidx_covers = BoundedCache("GDB's EHABI covers", VERDICT_CACHE_SIZE)  # call site -> why, or None
        self.signal_pcs = BoundedCache("signal trampoline pcs", VERDICT_CACHE_SIZE)  # covered lookup pc -> True
        #   (in a signal trampoline: CIE augmentation 'S')
        self.heuristic = BoundedCache("GDB's heuristic agrees", VERDICT_CACHE_SIZE)
        #   (lookup pc, exact) -> why GDB's prologue analyser gives the analysis' caller
        self.pauth = BoundedCache("pauth feature", 16)      # gdb architecture name -> has the pauth registers
        self._generation = None

    def _for_generation(self, generation):
        """Drop what rests on another generation of the module list."""
        self._generation = generation
        for cache in (self.covers, self.exidx_covers, self.signal_pcs, self.heuristic):
            cache.for_generation(generation)

    def invalidate(self):
        self._modules_verdict = None
        self._loaded = None
        for cache in (self.pauth, self.covers, self.exidx_covers, self.signal_pcs, self.heuristic):
            cache.clear()

    def heuristic_gives(self, lookup, exact, why):
        """Remember that GDB's own prologue analyser gives the very caller the analysis proves at
        this lookup pc (plugin.debugger_heuristic.same_as_debugger; both rows depend on the pc alone)."""
        self.heuristic.put((lookup, exact), why)
        self.callers.verdicts.discard(lookup + 1)     # the caller verdict of that return address, decided again

    def _loaded_sets(self):
        if self._loaded is None:
            self._loaded = objfiles.loaded(gdb.selected_inferior().progspace)
        return self._loaded

    def loaded_by_gdb(self, module) -> bool:
        paths, in_memory = self._loaded_sets()
        if module.path:
            return os.path.realpath(module.path) in paths
        return module.header_address in in_memory

    def leaves_all_to_gdb(self, ctx) -> bool:
        """With table sources only and no trap handlers: can the plugin claim no frame under auto?
        True when every module it knows is an objfile GDB loaded and has no table but those GDB's
        DWARF unwinder reads, on an architecture where GDB uses them everywhere. Then every
        pc the plugin has a row for, GDB covers from the same row (gdb_covers), and the unwinder
        need not look at a single frame. A source that reads code or the stack (analysis, the
        guesses) may add a frame wherever no table covers the pc, and nearly every process has
        such code (_init, crtstuff's functions, stubs between libc's functions): then it looks."""
        if ctx.arch.name not in GDB_USES_ITS_TABLES or any(map(is_fallback, ctx.sources)):
            return False
        ctx.modules.refresh()
        key = ctx.modules.generation
        if self._modules_verdict is None or self._modules_verdict[0] != key:
            self._modules_verdict = (key, all(self.loaded_by_gdb(module) and GDB_TABLES.issuperset(module.tables)
                                              for module in ctx.modules.modules))
        return self._modules_verdict[1]

    def has_pauth(self, pending_frame, arch_name) -> bool:
        """Does GDB know arch_name's pointer-authentication mask register? Read from pending_frame (a
        gdb.PendingFrame or gdb.Frame), or from the newest frame where None (a frame filter)."""
        known = self.pauth.get(arch_name)
        if known is None:
            try:
                (pending_frame or gdb.newest_frame()).read_register(PAUTH_REGISTER)
                known = True
            except (ValueError, gdb.error):
                known = False
            self.pauth.put(arch_name, known)
        return known

    def gdb_covers(self, pc, ctx, pending_frame, call_site=False) -> Optional[str]:
        """Why GDB's own DWARF unwinder handles the frame whose lookup pc is `pc` from the
        same table, or None if it does not. call_site: the frame is a caller whose callee
        is a normal frame, where GDB's EHABI unwinder trusts .ARM.exidx too."""
        generation = ctx.target.generation
        if self._generation != generation:      # the module list changed
            self._for_generation(generation)
        verdict = self.covers.get(pc, False)
        if verdict is False:
            verdict = self.covers.put(pc, self._covers(pc, ctx, pending_frame))
        if verdict is None and call_site and ctx.arch.name == "arm":
            verdict = self.exidx_covers.get(pc, False)
            if verdict is False:
                verdict = self.exidx_covers.put(pc, None if sigtramp.gdb_takes(ctx, pc) else self._exidx_covers(pc, ctx))
        return verdict

    def _exidx_covers(self, pc, ctx):
        """GDB's arm unwinder reads .ARM.exidx of each objfile it loaded and uses an entry at
        a call site (its callee a normal frame) when the entry can be unwound; elsewhere
        (the innermost frame, a frame interrupted by a signal) it analyses the prologue."""
        module = ctx.modules.find(pc)
        if module is None or not self.loaded_by_gdb(module):
            return None
        entry = ExidxTables.of(module, ctx.target).unwindable(pc, ctx.symbol)
        if entry is None:
            return None
        return "GDB's EHABI unwinder covers the call site 0x%x (.ARM.exidx entry %d for 0x%x in %s): " \
            "left to GDB (set unwind claim auto)" % (pc, entry.index, entry.function, module.name)

    def _covers(self, pc, ctx, pending_frame):
        if sigtramp.gdb_takes(ctx, pc):
            return None     # GDB's sigtramp unwinder, before its tables: the slow path decides (sigtramp.py)
        module = ctx.modules.find(pc)
        if module is None:
            # Not placed (a remote target's library without debug information
            # cannot be located without a GDB command): if GDB has a library
            # there, GDB knows this code and the plugin cannot tell more.
            try:
                library = gdb.selected_inferior().progspace.solib_name(pc)
            except (gdb.error, RuntimeError, AttributeError):
                library = None
            if library:
                return "0x%x is in %s, which GDB loaded and the plugin could not locate: left to GDB" \
                    % (pc, library)
            return None
        if not self.loaded_by_gdb(module):
            return None
        hit = CfiTables.of(module, ctx.target).row_for(pc)
        if hit is None:
            return None
        section, _, fde, _, row = hit
        if section not in GDB_DWARF_SECTIONS:
            return None
        if row.ra_signed and not self.has_pauth(pending_frame, ctx.arch.name):
            return None     # GDB would keep the PAC signature in the return address
        if fde.cie.signal_frame:
            self.signal_pcs.put(pc, True)
        return "GDB's DWARF unwinder covers 0x%x (%s FDE 0x%x-0x%x in %s): left to GDB (set unwind claim auto)" \
            % (pc, section, fde.start, fde.end, module.name)

