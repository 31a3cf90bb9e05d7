"""One ORC entry applied to a frame's registers: the caller's pc, sp and bp.

The rules of the kernel's unwind_orc.c (unwind_next_frame), as facts:

- The entry is the last one whose ip <= the pc looked up; that pc is the
  frame's pc when it is exact (the innermost frame, or a frame an interrupt
  or exception left: `signal`), else pc - 1 (a return address).
- CFA from sp_reg: SP: sp + sp_offset; BP: bp + sp_offset; SP_INDIRECT: the
  word at sp, plus sp_offset (since v5.12; before, the word at sp +
  sp_offset); BP_INDIRECT: the word at bp + sp_offset; DX, DI, R10, R13:
  that register + sp_offset, known only when registers were saved (a
  pt_regs) or given for the innermost frame.
- CALL: the return address is the word at CFA - 8, the caller's sp is the CFA.
- REGS: a whole struct pt_regs at the CFA; the caller's pc (exact) and sp
  are its ip and sp, and bp is its bp unless bp_reg says otherwise.
- REGS_PARTIAL: an iret frame at the CFA (ip, cs, flags, sp, ss); the
  caller's pc (exact) and sp come from it.
- bp: UNDEFINED leaves it (or takes pt_regs' bp after REGS); PREV_SP: the
  word at CFA + bp_offset; BP: the word at bp + bp_offset.
- UNDEFINED: no rule (an error for the kernel); END_OF_STACK: the last frame.
  A REGS/REGS_PARTIAL frame whose saved cs has RPL 3 came from user mode:
  the kernel's stack ends there.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Mapping, Optional

from plugin.errors import MemoryReadError
from plugin.formats.orc import OrcEntry, OrcReg, OrcTable, OrcType

MASK = 0xFFFFFFFFFFFFFFFF
# struct pt_regs on x86-64 (arch/x86/include/asm/ptrace.h): offsets of its words.
PT_REGS = {"r15": 0, "r14": 8, "r13": 16, "r12": 24, "bp": 32, "bx": 40, "r11": 48, "r10": 56,
           "r9": 64, "r8": 72, "ax": 80, "cx": 88, "dx": 96, "si": 104, "di": 112, "orig_ax": 120,
           "ip": 128, "cs": 136, "flags": 144, "sp": 152, "ss": 160}
IRET_FRAME = {"ip": 0, "cs": 8, "flags": 16, "sp": 24, "ss": 32}
OTHER_BASES = {OrcReg.DX: "dx", OrcReg.DI: "di", OrcReg.R10: "r10", OrcReg.R13: "r13"}


class Outcome(Enum):
    CALLER = "caller"                   # a CALL frame's caller
    INTERRUPTED = "interrupted"         # the frame a REGS/REGS_PARTIAL frame saved (exact pc)
    END_OF_STACK = "end of stack"
    USER_MODE = "user mode"             # the saved cs says user mode: the kernel stack ends
    UNDEFINED = "undefined"             # the entry has no rule here
    NO_ENTRY = "no entry"               # no entry covers the pc
    UNREADABLE = "unreadable"           # a stack word could not be read
    UNKNOWN_REGISTER = "unknown register"   # the rule needs a register not known here


@dataclass(frozen=True)
class Frame:
    """A frame's registers: pc, sp, bp, and any others known (a pt_regs' words, by PT_REGS name)."""
    pc: int
    sp: int
    bp: int
    exact: bool = True                  # pc is where execution stopped (not a return address)
    others: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What one entry said: the caller's frame (for CALLER and INTERRUPTED), the CFA, and why."""
    outcome: Outcome
    entry: Optional[OrcEntry]
    cfa: Optional[int] = None
    caller: Optional[Frame] = None
    regs_address: Optional[int] = None  # where REGS' pt_regs or REGS_PARTIAL's iret frame is
    reason: str = ""


ReadWord = Callable[[int], Optional[int]]
READ_ERRORS = (MemoryReadError, OSError, ValueError, LookupError, RuntimeError)     # a word that cannot be read


def word_reader(read: Callable[[int, int], bytes]) -> ReadWord:
    """A ReadWord over read(address, size): None where read raises or returns short. Its `read`
    attribute is READ itself (a pt_regs is read in one piece: _read_words)."""
    def read_word(address: int) -> Optional[int]:
        try:
            raw = read(address & MASK, 8)
        except READ_ERRORS:
            return None
        return struct.unpack("<Q", raw)[0] if raw is not None and len(raw) == 8 else None
    read_word.read = read
    return read_word


def step(table: OrcTable, frame: Frame, read_word: ReadWord, sp_indirect_v5_12: bool = True) -> Step:
    """The entry covering the frame's pc (pc - 1 unless exact) applied to it."""
    lookup = frame.pc if frame.exact else frame.pc - 1
    entry = table.lookup(lookup)
    if entry is None:
        return Step(Outcome.NO_ENTRY, None, reason="no ORC entry at or below 0x%x" % lookup)
    return apply(entry, frame, read_word, sp_indirect_v5_12)


def apply(entry: OrcEntry, frame: Frame, read_word: ReadWord, sp_indirect_v5_12: bool = True) -> Step:
    """Entry `entry` applied to `frame`, reading stack words with read_word."""
    if entry.type is OrcType.END_OF_STACK:
        return Step(Outcome.END_OF_STACK, entry, reason="the entry marks the end of the stack")
    if entry.type is OrcType.UNDEFINED:
        return Step(Outcome.UNDEFINED, entry, reason="the entry has no rule at 0x%x" % entry.ip)
    cfa, problem = _cfa(entry, frame, read_word, sp_indirect_v5_12)
    if cfa is None:
        return Step(problem[0], entry, reason=problem[1])
    if entry.type is OrcType.CALL:
        pc = read_word(cfa - 8)
        if pc is None:
            return _unreadable(entry, cfa - 8, "the return address", cfa)
        return _with_bp(entry, frame, read_word, cfa, Frame(pc, cfa, frame.bp, exact=entry.signal),
                        None, Outcome.CALLER)
    if entry.type is OrcType.REGS:
        words = _read_words(read_word, cfa, PT_REGS)
        if isinstance(words, tuple):
            return _unreadable(entry, words[0], "pt_regs.%s" % words[1], cfa)
        caller = Frame(words["ip"], words["sp"], words["bp"], exact=True, others=words)
        return _with_bp(entry, frame, read_word, cfa, caller, cfa, Outcome.INTERRUPTED, words["cs"])
    words = _read_words(read_word, cfa, IRET_FRAME)
    if isinstance(words, tuple):
        return _unreadable(entry, words[0], "the iret frame's %s" % words[1], cfa)
    caller = Frame(words["ip"], words["sp"], frame.bp, exact=True, others=words)
    return _with_bp(entry, frame, read_word, cfa, caller, cfa - PT_REGS["ip"], Outcome.INTERRUPTED, words["cs"])


def _cfa(entry, frame, read_word, sp_indirect_v5_12):
    """(cfa, None) or (None, (outcome, reason))."""
    reg, offset = entry.sp_reg, entry.sp_offset
    if reg == OrcReg.SP:
        return (frame.sp + offset) & MASK, None
    if reg == OrcReg.BP:
        return (frame.bp + offset) & MASK, None
    if reg == OrcReg.SP_INDIRECT:
        at = frame.sp if sp_indirect_v5_12 else frame.sp + offset
        word = read_word(at)
        if word is None:
            return None, (Outcome.UNREADABLE, "cannot read the CFA's word at 0x%x" % (at & MASK))
        return ((word + offset) if sp_indirect_v5_12 else word) & MASK, None
    if reg == OrcReg.BP_INDIRECT:
        at = (frame.bp + offset) & MASK
        word = read_word(at)
        if word is None:
            return None, (Outcome.UNREADABLE, "cannot read the CFA's word at 0x%x" % at)
        return word, None
    name = OTHER_BASES.get(reg)
    if name is not None and name in frame.others:
        return (frame.others[name] + offset) & MASK, None
    what = name or "base register %d" % reg
    return None, (Outcome.UNKNOWN_REGISTER, "the CFA is %s%+d and %s is not known here" % (what, offset, what))


def _with_bp(entry, frame, read_word, cfa, caller, regs_address, outcome, cs=None):
    """The step with the caller's bp restored by bp_reg."""
    bp = caller.bp
    if entry.bp_reg in (OrcReg.PREV_SP, OrcReg.BP):
        at = ((cfa if entry.bp_reg == OrcReg.PREV_SP else frame.bp) + entry.bp_offset) & MASK
        bp = read_word(at)
        if bp is None:
            return _unreadable(entry, at, "the saved bp", cfa)
    elif entry.bp_reg != OrcReg.UNDEFINED:
        return Step(Outcome.UNKNOWN_REGISTER, entry, cfa,
                    reason="bp is restored from base register %d, which the kernel does not use" % entry.bp_reg)
    caller = Frame(caller.pc, caller.sp, bp, caller.exact, caller.others)
    if cs is not None and cs & 3:
        return Step(Outcome.USER_MODE, entry, cfa, caller, regs_address,
                    reason="the saved cs 0x%x is user mode: the kernel stack ends here" % cs)
    return Step(outcome, entry, cfa, caller, regs_address, reason=_rule_words(entry, regs_address))


def _unreadable(entry, address, what, cfa):
    return Step(Outcome.UNREADABLE, entry, cfa, reason="cannot read %s at 0x%x" % (what, address & MASK))


def _rule_words(entry, regs_address):
    if entry.type is OrcType.REGS:
        return "pt_regs at 0x%x: the interrupted frame's registers, its pc exact" % regs_address
    if entry.type is OrcType.REGS_PARTIAL:
        return "iret frame at 0x%x: the interrupted frame's pc (exact) and sp" % (regs_address + PT_REGS["ip"])
    return "return address at CFA-8"


def _read_words(read_word, base: int, layout: dict):
    """{name: word} read at base + each offset of layout, or (address, name) of the first unreadable one.
    In one read where the reader has one (word_reader's) and the words lie in one piece, else a word
    at a time (which also finds the unreadable one)."""
    read = getattr(read_word, "read", None)
    size = max(layout.values()) + 8
    if read is not None and size == 8 * len(layout) and base & MASK == base and base + size <= MASK:
        try:
            raw = read(base, size)
        except READ_ERRORS:
            raw = None
        if raw is not None and len(raw) == size:
            values = struct.unpack("<%dQ" % len(layout), raw)
            return {name: values[offset // 8] for name, offset in layout.items()}
    words = {}
    for name, offset in layout.items():
        value = read_word(base + offset)
        if value is None:
            return base + offset, name
        words[name] = value
    return words
