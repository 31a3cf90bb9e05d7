"""Where the `analysis` source starts reading a function that has no table: its first instruction.

Tried in this order (plugin.strategies.analysis follows each until one decides the frame):
  symbol   the function symbol holding the pc (then only starts above it: the nearest symbol
           below may be a size-less one, `_start`, with a nameless function between);
  table    a neighbouring function's table entry: the .eh_frame/.debug_frame
           FDE or SFrame FDE that ends nearest below the pc (no entry covering
           the pc), its end then moved past the alignment padding the compiler
           or linker put after it (runs of nop and int3; aarch64 nop and udf #0);
           on Arm first the .ARM.exidx entry covering the pc: each entry starts
           a function, even one marked EXIDX_CANTUNWIND;
  call     the call that reached it: a direct call (`call rel32`, `bl`) just
           before a return address on the stack (or, on aarch64, in the link
           register) whose target lies at or below the pc. The row from that
           start must then place the return address exactly where that call's
           return address was found, or it is not used;
  prologue the nearest frame-record prologue before the pc (`push rbp; mov rbp,
           rsp`, `stp x29, x30, [sp, #-N]!`), for functions no call reached (a
           signal handler, a thread's start routine).
Each start carries the sentence the evidence gives for it. On Arm the code
is read in the frame's instruction set (CPSR.T), one CodeAnalysis per set.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

from plugin import analysis as code_analysis
from plugin.analysis.ops import Flow
from plugin.arch import arm
from plugin.errors import DecodeError, MemoryReadError
from plugin.formats.exidx import EntryKind
from plugin.model.vocabulary import Found, Vocabulary
from plugin.strategies import exidx as exidx_strategy, process_entry
from plugin.strategies.cfi import CfiTables
from plugin.strategies.scan import read_stack_words
from plugin.strategies.sframe import SFrameTables

CODE_CACHE_KEY = "analysis: code"          # module.cache: the module's CodeAnalysis
RANGES_CACHE_KEY = "analysis: table ranges"  # module.cache: sorted (start, end, what) of its table entries
MAX_FUNCTION = 1 << 16               # a start further below the pc than this is not believed
MAX_PADDING = 64                     # bytes of alignment padding skipped after a neighbour's end
CALLER_WORDS = 256                   # stack words searched for the call that reached the function
MAX_CALL_STARTS = 4                  # starts from calls tried before giving up
PROLOGUE_WINDOW = 4096               # how far below the pc a prologue is looked for
MAX_PROLOGUE_STARTS = 2              # prologues tried, the nearest first


class StartBy(Vocabulary):
    """How the analysis found a function's first instruction."""
    SYMBOL = ("symbol", "the function symbol holding the pc")
    TABLE = ("table", "the end of the neighbouring function's table entry, after its alignment padding")
    CALL = ("call", "the target of the direct call that reached the function")
    PROLOGUE = ("prologue", "the nearest frame-record prologue before the pc")
    ENTRY = ("entry", "main's address, which the program's entry code hands to __libc_start_main")
    FORWARD = ("forward", "none: the code was read forward from the pc, the start unknown")


@dataclass(frozen=True)
class Start(Found):
    """A function's first instruction (by: a StartBy)."""
    name: Optional[str] = None
    slot: Optional[int] = None              # CALL: where its return address was found (None: the link register)
    return_address: Optional[int] = None    # CALL: that return address


def starts(frame, ctx, pc, thumb=False) -> Iterator[Start]:
    found = ctx.symbol(pc)
    start = None if found is None else found[1] & ~1 if ctx.arch.name == "arm" else found[1]
    if found is not None and 0 <= pc - start < MAX_FUNCTION:
        yield Start(start, StartBy.SYMBOL, "the function starts at 0x%x: the symbol %s" % (start, found[0]),
                    found[0])
        # The nearest symbol below the pc may not hold it (a size-less `_start`, a stripped program's
        # .dynsym): a nameless function may lie between them, so only starts above it are tried next.
        for other in _other_starts(frame, ctx, pc, thumb):
            if other.address > start:
                yield other
        return
    yield from _other_starts(frame, ctx, pc, thumb)


def _other_starts(frame, ctx, pc, thumb) -> Iterator[Start]:
    if ctx.arch.name == "arm":
        from_exidx = _start_from_exidx(ctx, pc)
        if from_exidx is not None:
            yield from_exidx
    from_table = start_from_table(ctx, pc, thumb)
    if from_table is not None:
        yield from_table
    yield from _starts_from_calls(frame, ctx, pc, thumb)
    if ctx.arch.name != "arm":               # no frame-record prologue pattern is declared for Arm
        yield from _starts_from_prologues(ctx, pc)
    main = process_entry.main_from_entry(ctx, pc)
    if main is not None and 0 <= pc - main[0] < MAX_FUNCTION:
        yield Start(main[0], StartBy.ENTRY, "the function starts at 0x%x: main, whose address the entry code "
                                            "at 0x%x passes to __libc_start_main (`%s`)" % main, "main")


def thumb_state(frame, ctx) -> Optional[bool]:
    """Is the frame's code Thumb (Arm: its CPSR.T; None when unknown)? False on other architectures."""
    if ctx.arch.name != "arm":
        return False
    cpsr = frame.registers.get(arm.CPSR)
    return None if cpsr is None else bool(cpsr & arm.CPSR_THUMB)


def code_of(ctx, address, thumb=False) -> code_analysis.CodeAnalysis:
    """The module's CodeAnalysis for an instruction set (kept with the module), or a fresh one for
    code outside every module."""
    module = ctx.modules.find(address)
    if module is None:
        return code_analysis.CodeAnalysis(ctx.arch, ctx.read_memory, symbol=_symbol_name(ctx), thumb=thumb)
    key = CODE_CACHE_KEY + (" (thumb)" if thumb else "")
    code = module.cache.get(key)
    if code is None:
        code = module.cache[key] = code_analysis.CodeAnalysis(ctx.arch, ctx.read_memory,
                                                              symbol=_symbol_name(ctx), thumb=thumb)
    return code


def _symbol_name(ctx):
    def name(address):
        found = ctx.symbol(address)
        return found[0] if found and found[1] & ~1 == address & ~1 else None
    return name


# -- the .ARM.exidx entry covering the pc ----------------------------------------------

def _start_from_exidx(ctx, pc) -> Optional[Start]:
    """The start of the .ARM.exidx entry covering pc: a function's first instruction."""
    entry = _exidx_entry(ctx, pc)
    if entry is None or pc - entry.function >= MAX_FUNCTION:
        return None
    what = "marked EXIDX_CANTUNWIND" if entry.kind == EntryKind.CANTUNWIND else "%s entry" % entry.kind.value
    return Start(entry.function, StartBy.TABLE, "the function starts at 0x%x: the .ARM.exidx entry %d covering "
                 "the pc starts there (%s)" % (entry.function, entry.index, what))


def exidx_note(ctx, pc) -> Optional[str]:
    """Why EHABI left an Arm frame to its code: its entry says EXIDX_CANTUNWIND, or no entry covers pc."""
    module = ctx.modules.find(pc)
    if ctx.arch.name != "arm" or module is None or exidx_strategy.SECTION not in module.tables:
        return None
    entry = _exidx_entry(ctx, pc)
    if entry is None:
        return ("no .ARM.exidx entry covers 0x%x (past the last entry, or in a gap the linker filled): "
                "the code decided" % pc)
    if entry.kind == EntryKind.CANTUNWIND:
        return ("the .ARM.exidx entry %d for 0x%x says EXIDX_CANTUNWIND: the table marks the function as not "
                "unwindable by exceptions, and its code decided" % (entry.index, entry.function))
    return None


def _exidx_entry(ctx, pc):
    """The .ARM.exidx entry covering pc, or None."""
    module = ctx.modules.find(pc)
    if module is None:
        return None
    try:
        tables = exidx_strategy.ExidxTables.of(module, ctx.target)
        table = tables.table()
        entry = table.find(pc) if table is not None else None
        return entry if entry is not None and pc < tables.end_of(entry) else None
    except (DecodeError, MemoryReadError):
        return None


# -- a neighbouring function's table --------------------------------------------------

def start_from_table(ctx, pc, thumb=False) -> Optional[Start]:
    """The first instruction after the table entry that ends nearest below pc, past its padding."""
    module = ctx.modules.find(pc)
    if module is None:
        return None
    below = _entry_below(table_ranges(module, ctx), pc)
    if below is None:
        return None
    end, what = below
    if pc - end >= MAX_FUNCTION:
        return None
    code = code_of(ctx, pc, thumb)
    address, padding = end, []
    while address < pc and address - end < MAX_PADDING:
        insn = code.decode_at(address)
        if insn is None or not code.facts.is_padding(insn.text):
            break
        padding.append(insn.text)
        address = insn.end
    if address - end >= MAX_PADDING or address > pc:
        return None
    pad = ("after %d bytes of alignment padding (%s)" % (address - end, ", ".join("`%s`" % t for t in padding))
           if padding else "no padding between them")
    why = "the function starts at 0x%x: %s ends at 0x%x just below the pc, %s" % (address, what, end, pad)
    return Start(address, StartBy.TABLE, why)


def _entry_below(ranges: List[Tuple[int, int, str]], pc) -> Optional[Tuple[int, str]]:
    """(end, what) of the entry ending nearest at or below pc, or None when an entry covers pc."""
    i = bisect.bisect_right(ranges, (pc, float("inf"))) - 1
    best = None
    for start, end, what in ranges[max(0, i - 8):i + 1]:    # entries may nest: the few before decide
        if start <= pc < end:
            return None
        if end <= pc and (best is None or end > best[0]):
            best = (end, what)
    return best


def table_ranges(module, ctx) -> List[Tuple[int, int, str]]:
    """Sorted (start, end, what) of the module's FDEs and SFrame FDEs (decoded once, kept with the module)."""
    ranges = module.cache.get(RANGES_CACHE_KEY)
    if ranges is None:
        ranges = module.cache[RANGES_CACHE_KEY] = sorted(_entries(module, ctx))
    return ranges


def _entries(module, ctx):
    try:
        for name, section in CfiTables.of(module, ctx.target).sections():
            for fde in section.fdes():
                if fde.end > fde.start:
                    yield fde.start, fde.end, "the %s FDE at 0x%x (0x%x-0x%x)" % (name, fde.offset, fde.start, fde.end)
        section = SFrameTables.of(module, ctx.target).section()
        for fde in section.fdes if section is not None else ():
            if fde.end > fde.start:
                yield fde.start, fde.end, "the .sframe FDE %d (0x%x-0x%x)" % (fde.index, fde.start, fde.end)
    except (DecodeError, MemoryReadError):      # a table that cannot be read places no neighbour
        return


# -- the call that reached it ----------------------------------------------------------

def _starts_from_calls(frame, ctx, pc, thumb=False) -> Iterator[Start]:
    arch = ctx.arch
    facts = code_analysis.FACTS[arch.name]
    candidates = []
    if facts.RA_REGISTER is not None and frame.exact_pc and arch.ra in frame.registers:
        candidates.append((None, frame.registers[arch.ra]))
    sp = frame.registers.get(arch.sp)
    if sp is not None:
        candidates += read_stack_words(ctx, sp, CALLER_WORDS)[0]
    seen, tried = set(), 0
    for slot, value in candidates:
        address = arch.strip_pointer_auth(value)
        caller_thumb = False
        if arch.name == "arm":               # bit 0: the caller's instruction set
            address, caller_thumb = value & ~1, bool(value & 1)
        if address in seen or not ctx.is_code(address):
            continue
        seen.add(address)
        target = _direct_call_target(ctx, address, caller_thumb)
        if target is None or not 0 <= pc - target < MAX_FUNCTION:
            continue
        tried += 1
        found = ctx.symbol(target)
        where = "the link register" if slot is None else "[0x%x]" % slot
        why = "the function starts at 0x%x: the target of the call before the return address 0x%x in %s" \
            % (target, address, where)
        yield Start(target, StartBy.CALL, why, found[0] if found and found[1] == target else None, slot, address)
        if tried >= MAX_CALL_STARTS:
            return


def _direct_call_target(ctx, return_address, thumb=False) -> Optional[int]:
    """The target of the direct call instruction that ends at return_address, or None."""
    code = code_of(ctx, return_address, thumb)
    for size in code.facts.DIRECT_CALL_SIZES:
        insn = code.decode_at(return_address - size)
        if insn is not None and insn.end == return_address and insn.flow == Flow.CALL and insn.target is not None:
            return insn.target
    return None


# -- a prologue --------------------------------------------------------------------------

def _starts_from_prologues(ctx, pc) -> Iterator[Start]:
    """Functions entered by no call (a signal handler, a thread's start): the nearest prologues
    before the pc, within PROLOGUE_WINDOW bytes. The row from such a start is checked like every
    other (its return address must follow a call or be a signal trampoline)."""
    low = max(pc + 1 - PROLOGUE_WINDOW, 0)
    module = ctx.modules.find(pc)
    if module is not None:
        segment_start = next((s.start for s in module.segments if s.start <= pc < s.end), None)
        if segment_start is not None:
            low = max(low, segment_start)
    elif ctx.knows_mappings():      # code outside every module (JIT code): within its mapping
        mapping = ctx.mapping_at(pc)
        if mapping is not None:
            low = max(low, mapping.start)
    try:
        code = bytes(ctx.read_memory(low, pc + 1 - low))
    except Exception:           # unreadable code: no prologue can be found
        return
    for start in ctx.arch.entries_in(code, low)[:MAX_PROLOGUE_STARTS]:
        yield Start(start, StartBy.PROLOGUE, "the function starts at 0x%x: the nearest frame-record prologue "
                                             "before the pc" % start)
