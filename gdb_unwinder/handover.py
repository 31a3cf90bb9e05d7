"""What the GDB unwinder knows of the frame GDB asks about, and what it hands GDB for its caller.

Asked: the pending frame as far as the unwinder looked at it (level, pc, registers, exact pc).
Found: the caller a replay or the engine found. LastClaim: the previous call's claim, whose
caller GDB asks about next. hand_over: the gdb.UnwindInfo built from a Found.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import gdb

from .compat import pending_level
from .registers import Handed, handed_registers


class LastClaim(NamedTuple):
    """The previous call's claim: GDB asks about that frame's caller next."""
    level: int
    inferior: object        # its InferiorState
    record: Handed          # the registers handed to GDB for the caller
    pc: Optional[int]       # the caller's pc and sp
    sp: Optional[int]
    thread: object          # the gdb.InferiorThread selected then


class Found(NamedTuple):
    """The caller found for the pending frame: its registers (DWARF number -> int), CFA, function
    start (the frame id), and the numbers the accepted row has a rule for."""
    registers: dict
    cfa: int
    start: int
    ruled: dict


class Asked:
    """The pending frame GDB asks about, as far as the unwinder has looked at it."""
    __slots__ = ("level", "pc", "registers", "ctx", "exact", "trap", "handed")

    def __init__(self, level, pc, registers, ctx):
        self.level, self.pc, self.registers, self.ctx = level, pc, registers, ctx
        self.exact = self.trap = False      # the pc is the frame's own (not a return address); in a trap handler
        self.handed = None                  # the Handed record of the claim of its callee, if this plugin made it

    @property
    def lookup(self):
        """The pc its row is looked up at: a return address is looked up at pc-1."""
        return self.pc if self.exact else self.pc - 1


def hand_over(pending_frame, frame_id, asked, target, found, gdb_value, memo):
    """Give GDB the frame id (frame_ids.FrameIds) and every register of the caller it has: the row's, and those the row
    says nothing about at their callee value (GDB's "unspecified" rule, dwarf2/frame.c).
    gdb_value(pending_frame, name, int): the gdb.Value to hand for a register (FastClaims.value);
    memo: the unwinder's StopAnswers, told what was given.
    Returns the gdb.UnwindInfo, the Handed record of the caller's registers, its pc and sp."""
    registers = asked.registers
    arch, caller, ruled = target.arch, found.registers, found.ruled
    known, raws = registers.known, registers.raw
    descriptors = target.descriptors     # by descriptor: GDB looks no name up
    link = arch.ra if arch.ra != arch.pc else None   # aarch64: the RA column becomes pc
    if link is not None and link not in caller and arch.pc in caller:
        # The caller's link register holds what its call left there, the return
        # address, as GDB's DWARF unwinder gives the RA column; "not saved" would
        # stop GDB's own unwinders for the frames above.
        caller = dict(caller)
        caller[link] = caller[arch.pc]
    raw_given, known_given = {}, {}     # the caller's registers, as Handed keeps them
    complete = True
    names, values = [], []      # handed to GDB in one go at the end
    for number, name in handed_registers(arch):
        if number in caller:
            value = caller[number]
            raw = raws.get(number)
            if raw is None or known.get(number) != value:
                raw = gdb_value(pending_frame, name, value)
        elif number in ruled:
            known_given[number] = None
            continue        # undefined, or its rule could not be evaluated: not saved
        else:
            raw = raws.get(number)
            if raw is None:
                raw = registers.same_value(number, name)
                if raw is None:
                    known_given[number] = None
                    continue
            value = known.get(number)
            if value is None:       # read but never needed as a number: the next frame may
                try:
                    value = int(raw) & arch.mask
                except (gdb.error, ValueError):
                    value = None
        names.append(descriptors.get(name, name))
        values.append(raw)
        raw_given[number] = raw
        if value is None:
            complete = False
        else:
            known_given[number] = value
    info = pending_frame.create_unwind_info(frame_id)
    any(map(info.add_saved_register, names, values))
    memo.given(frame_id, names, values)
    return info, Handed(raw_given, known_given, complete), caller.get(arch.pc), caller.get(arch.sp)


def descriptors_of(gdb_arch) -> dict:
    """Register name -> gdb.RegisterDescriptor of an architecture (GDB 12 and later), else {}."""
    try:
        return {d.name: d for d in gdb_arch.registers()}
    except (AttributeError, gdb.error):
        return {}


def ruled_registers(evidence) -> dict:
    """DWARF numbers the accepted row has a rule for (undefined ones included)."""
    rule = getattr(evidence, "rule", None)
    return getattr(rule, "registers", None) or {}


def frame_key(pending_frame, target, inferior, last):
    """(key, last): the key of the pending frame's answer, None where its pc or sp cannot be read
    (no answer kept); and `last` (the previous call's LastClaim), None where that claim was not
    of this frame's callee. The key is (thread, level, pc, sp, whether the callee's claim handed
    registers on, whether a signal interrupted the frame): the answer rests on all of them."""
    arch = target.arch
    if arch is None or pending_frame.architecture() is not target.gdb_arch:
        return None, last
    names, descriptors = arch.registers, target.descriptors
    try:
        pc = int(pending_frame.read_register(descriptors.get(names[arch.pc], names[arch.pc]))) & arch.mask
        sp = int(pending_frame.read_register(descriptors.get(names[arch.sp], names[arch.sp]))) & arch.mask
    except (gdb.error, ValueError):
        return None, last
    if last is not None and (last.pc, last.sp) != (pc, sp):
        last = None         # not the caller of the frame claimed last: GDB asks about another frame
    handed = last is not None and last.inferior is inferior
    return (gdb.selected_thread(), pending_level(pending_frame), pc, sp, handed, (pc, sp) in inferior.after_signal), last
