"""The canonical prologue and epilogue of an ARM64 packed .pdata entry, as unwind opcodes.

A packed entry (Flag=1, Flag=2) names no opcodes: its fields say which canonical
prologue the function has, and the unwinder acts as if it read the opcodes of that
prologue. Facts from Microsoft's "ARM64 exception handling" (packed unwind data),
with two cases that page leaves implicit, as dumpbin and RtlVirtualUnwind behave
(LLVM's llvm-readobj learnt them in 2025, pull requests 169676 and 170294):

  IntSZ = 8*RegI (+8 when CR=1), FpSZ = 8*(RegF+1) when RegF>0,
  SavSZ = (IntSZ + FpSZ + 64*H + 15) & ~15, LocSZ = FrameSize - SavSZ;
  0  CR=2: pacibsp                                        pac_sign_lr
  1  x19.. in pairs, the first pre-indexed by -SavSZ      save_regp(_x), save_reg(_x)
  2  CR=1: lr, paired with the last odd integer register  save_lrpair / save_reg(_x) lr
     (RegI=1, CR=1: sub sp,#16; stp x19,lr,[sp]; the rest of the frame in step 5)
  3  d8.. in pairs at IntSZ (pre-indexed when first)      save_fregp(_x), save_freg
  4  H: stp x0..x7 into the homing area                   nop x4
     (H with RegI=RegF=0 and CR!=1: homed after the prologue: no nops, LocSZ = FrameSize)
  5  CR=2,3: stp x29,lr,[sp,#-LocSZ]!; mov x29,sp (LocSZ <= 512), or sub sp,#LocSZ (in
     4080-byte steps); stp x29,lr,[sp]; mov x29,sp.  CR=0,1: sub sp,#LocSZ (4080 steps)

The epilogue undoes the prologue in reverse, except that it neither restores the
homed registers nor repeats `mov x29,sp` (autibsp mirrors pacibsp).
"""
from __future__ import annotations

from typing import List, Tuple

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import pdata_arm64 as a64

MAX_SUB = 4080          # the largest `sub sp, sp, #imm` step of a packed prologue


def _op(name: str, *raw: int) -> a64.Opcode:
    return a64.Opcode(name, bytes(raw), 0)


def _alloc_one(size: int) -> a64.Opcode:
    if size < 512:
        return _op("alloc_s", size // 16)
    return _op("alloc_m", 0xC0 | (size // 16) >> 8, (size // 16) & 0xFF)


def _alloc(size: int) -> List[a64.Opcode]:
    """`sub sp, sp, #size` in execution order: one step, or 4080 then the rest."""
    if size <= 0:
        return []
    if size <= MAX_SUB:
        return [_alloc_one(size)]
    if size - MAX_SUB > MAX_SUB:
        raise DecodeError("arm64 unwind", None, "packed local area of %d bytes is larger than two steps" % size,
                          DecodeKind.MALFORMED)
    return [_alloc_one(MAX_SUB), _alloc_one(size - MAX_SUB)]


def _int_saves(p: a64.Packed, sav: int) -> List[a64.Opcode]:
    """Steps 1 and 2 in execution order."""
    lr = p.cr == a64.CR.UNCHAINED_SAVED_LR
    if p.reg_i == 1 and lr:
        if p.reg_f or p.homed:
            raise DecodeError("arm64 unwind", None, "packed RegI=1 CR=1 with RegF or H is not evaluated",
                              DecodeKind.UNSUPPORTED)
        return [_op("alloc_s", 1), _op("save_lrpair", 0xD6, 0)]
    regs = list(range(p.reg_i)) + ([11] if lr else [])     # x(19+n); 11: lr (x30)
    run = []
    for k in range(0, len(regs), 2):
        x, pair = regs[k], regs[k + 1:k + 2]
        if k == 0:
            z = sav // 8 - 1
            if pair:
                run.append(_op("save_regp_x", 0xCC | x >> 2, (x & 3) << 6 | z))
            else:
                run.append(_op("save_reg_x", 0xD4 | x >> 3, (x & 7) << 5 | z))
        elif pair and pair[0] == 11:
            run.append(_op("save_lrpair", 0xD6 | (x // 2) >> 2, ((x // 2) & 3) << 6 | k))
        elif pair:
            run.append(_op("save_regp", 0xC8 | x >> 2, (x & 3) << 6 | k))
        else:
            run.append(_op("save_reg", 0xD0 | x >> 2, (x & 3) << 6 | k))
    return run


def _float_saves(p: a64.Packed, int_size: int, sav: int) -> List[a64.Opcode]:
    """Step 3 in execution order: d8..d(8+RegF)."""
    count = p.reg_f + 1 if p.reg_f else 0
    run = []
    for k in range(0, count, 2):
        z = (int_size + 8 * k) // 8
        pair = k + 1 < count
        if k == 0 and int_size == 0:            # the first save allocates the save area
            z = sav // 8 - 1
            run.append(_op("save_fregp_x", 0xDA | k >> 2, (k & 3) << 6 | z) if pair
                       else _op("save_freg_x", 0xDE, k << 5 | z))
        else:
            run.append(_op("save_fregp" if pair else "save_freg", (0xD8 if pair else 0xDC) | k >> 2,
                           (k & 3) << 6 | z))
    return run


def canonical(p: a64.Packed) -> Tuple[List[a64.Opcode], List[a64.Opcode]]:
    """(prologue, epilogue) opcodes in unwinding order: the prologue's last instruction first,
    the epilogue's first instruction first (one opcode per instruction, `ret` not counted)."""
    chained = p.cr in (a64.CR.CHAINED, a64.CR.CHAINED_PAC)
    int_size = 8 * p.reg_i + (8 if p.cr == a64.CR.UNCHAINED_SAVED_LR else 0)
    fp_size = 8 * (p.reg_f + 1) if p.reg_f else 0
    homed_late = p.homed and not int_size and not fp_size
    sav = (int_size + fp_size + (0 if homed_late else 64 * p.homed) + 15) & ~15
    loc = p.frame_size - sav
    if loc < 0:
        raise DecodeError("arm64 unwind", None, "packed FrameSize %d is smaller than its save area %d"
                          % (p.frame_size, sav), DecodeKind.MALFORMED)
    run = [_op("pac_sign_lr", 0xFC)] if p.cr == a64.CR.CHAINED_PAC else []
    run += _int_saves(p, sav) + _float_saves(p, int_size, sav)
    if p.homed and not homed_late:
        run += [_op("nop", 0xE3)] * 4
    if chained and loc < 16:
        raise DecodeError("arm64 unwind", None, "packed CR=%d leaves %d bytes for the frame record"
                          % (p.cr, loc), DecodeKind.MALFORMED)
    if chained and loc <= 512:
        run += [_op("save_fplr_x", 0x80 | (loc // 8 - 1)), _op("set_fp", 0xE1)]
    elif chained:
        run += _alloc(loc) + [_op("save_fplr", 0x40), _op("set_fp", 0xE1)]
    else:
        run += _alloc(loc)
    prologue = list(reversed(run))
    epilogue = [op for op in prologue if op.name not in ("set_fp", "nop")]
    return prologue, epilogue
