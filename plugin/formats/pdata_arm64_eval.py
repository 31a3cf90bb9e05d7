"""The caller's registers at a pc, by ARM64 Windows unwind data, as Windows
unwinds them: in the prologue only the opcodes of the instructions already run
apply (prologue opcodes are listed last-run first, one per instruction); in an
epilogue scope (or the packed epilogue at the function's end) the opcodes of
the instructions not yet run apply; elsewhere the whole prologue.

A pure function over read_memory(address, size) and a dict of registers
("x0".."x30", "sp", "pc"). Packed entries are turned into their equivalent
prologue opcodes for the forms _packed_prologue names; others raise DecodeError, as do
save_next, save_any_reg, alloc_z and the Microsoft frame opcodes (not evaluated
yet). Saved d registers are reported as addresses.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List

from plugin.errors import DecodeError
from plugin.formats import pdata_arm64 as a64

ReadMemory = Callable[[int, int], bytes]


@dataclass
class CallerFrame:
    cfa: int                                   # the caller's sp
    pc: int                                    # the return address (lr)
    registers: Dict[str, int]
    saved_at: Dict[str, int] = field(default_factory=dict)
    cfa_register: str = "sp"                   # the callee register the CFA was computed from


def _fail(cause: str) -> DecodeError:
    return DecodeError("arm64 unwind", None, cause)


def _apply(ops: List[a64.Opcode], regs: Dict[str, int], read_memory: ReadMemory) -> Dict[str, int]:
    """Run opcodes (in unwinding order) over regs; the addresses registers were read from."""
    saved: Dict[str, int] = {}

    def load(name: str, address: int) -> None:
        data = read_memory(address, 8)
        if data is None or len(data) < 8:
            raise _fail("cannot read 8 bytes at 0x%x" % address)
        saved[name] = address
        if not name.startswith("d"):
            regs[name] = struct.unpack("<Q", bytes(data))[0]

    def pair(first: str, second: str, address: int) -> None:
        load(first, address)
        load(second, address + 8)

    for op in ops:
        name, size, reg = op.name, a64.operand(op), a64.register(op)
        if name in ("end", "end_c"):
            break
        if name in ("alloc_s", "alloc_m", "alloc_l"):
            regs["sp"] += size
        elif name == "save_r19r20_x":
            pair("x19", "x20", regs["sp"])
            regs["sp"] += size
        elif name in ("save_fplr", "save_fplr_x"):
            pair("x29", "x30", regs["sp"] + (size if name == "save_fplr" else 0))
            regs["sp"] += size if name == "save_fplr_x" else 0
        elif name in ("save_regp", "save_regp_x", "save_fregp", "save_fregp_x"):
            second = "%s%d" % (reg[0], int(reg[1:]) + 1)
            pair(reg, second, regs["sp"] + (0 if name.endswith("_x") else size))
            regs["sp"] += size if name.endswith("_x") else 0
        elif name in ("save_reg", "save_reg_x", "save_freg", "save_freg_x"):
            load(reg, regs["sp"] + (0 if name.endswith("_x") else size))
            regs["sp"] += size if name.endswith("_x") else 0
        elif name == "save_lrpair":
            pair(reg, "x30", regs["sp"] + size)
        elif name == "set_fp":
            regs["sp"] = regs["x29"]
        elif name == "add_fp":
            regs["sp"] = regs["x29"] - size
        elif name in ("nop", "pac_sign_lr"):
            continue
        else:
            raise _fail("opcode %s (%s) is not evaluated yet" % (name, op.raw.hex()))
    return saved


def _body(ops: List[a64.Opcode]) -> List[a64.Opcode]:
    """The opcodes before the first end: one per instruction."""
    out = []
    for op in ops:
        if op.name in ("end", "end_c"):
            break
        out.append(op)
    return out


def unwind_arm64(entry: a64.Entry, xdata, image_base: int, pc: int,
                 registers: Dict[str, int], read_memory: ReadMemory) -> CallerFrame:
    """The caller's frame of a function stopped at pc; xdata from read_xdata for an entry
    whose flag is XDATA (else None)."""
    regs = dict(registers)
    offset = pc - (image_base + entry.begin)
    if entry.packed is not None:
        prologue = _packed_prologue(entry.packed)
        if entry.flag == a64.PdataFlag.FRAGMENT:
            saved = _apply(prologue, regs, read_memory)
            return CallerFrame(regs["sp"], regs["x30"], regs, saved)
        length = entry.packed.function_length
        epilogues = [(length - 4 * (len(prologue) + 1), prologue)]
    else:
        prologue = _body(a64.opcodes(xdata.codes))
        epilogues = [(s.offset, _body(a64.opcodes(xdata.codes, s.start_index)))
                     for s in xdata.scopes]
        if xdata.epilogue_packed:
            body = _body(a64.opcodes(xdata.codes, xdata.epilogue_count))
            epilogues = [(xdata.function_length - 4 * (len(body) + 1), body)]
    ops = prologue
    for start, body in epilogues:
        if start <= offset <= start + 4 * len(body):
            ops = body[(offset - start) // 4:]           # those not run yet
            break
    else:
        if offset < 4 * len(prologue):
            ops = prologue[len(prologue) - offset // 4:]  # those already run
    saved = _apply(ops, regs, read_memory)
    base = "x29" if any(op.name in ("set_fp", "add_fp") for op in _body(ops)) else "sp"
    return CallerFrame(regs["sp"], regs["x30"], regs, saved, base)


def _op(name: str, *raw: int) -> a64.Opcode:
    return a64.Opcode(name, bytes(raw), 0)


def _alloc(size: int) -> List[a64.Opcode]:
    if size <= 0:
        return []
    if size < 512:
        return [_op("alloc_s", size // 16)]
    if size < 32768:
        return [_op("alloc_m", 0xC0 | (size // 16) >> 8, (size // 16) & 0xFF)]
    raise _fail("packed local area of %d bytes is not evaluated yet" % size)


def _packed_prologue(p: a64.Packed) -> List[a64.Opcode]:
    """The opcodes (last-run first) equal to a packed entry's canonical prologue, for the
    forms evaluated: RegF = 0 and H = 0, with CR 0 or 1 (any RegI: the integer saves, lr
    with them when CR = 1, then `sub sp`). Chained frames (CR 2 and 3) are not, for want
    of a clang-built example to prove them on."""
    if p.reg_f or p.homed or p.cr in (a64.CR.CHAINED_PAC, a64.CR.CHAINED):
        raise _fail("packed form RegI=%d RegF=%d H=%d CR=%d is not evaluated yet"
                    % (p.reg_i, p.reg_f, p.homed, p.cr))
    lr = p.cr == a64.CR.UNCHAINED_SAVED_LR
    saved = p.reg_i + (1 if lr else 0)
    save_size = (8 * saved + 15) // 16 * 16
    run: List[a64.Opcode] = []                  # in execution order
    regs = ["x%d" % (19 + n) for n in range(p.reg_i)] + (["x30"] if lr else [])
    for k in range(0, len(regs), 2):
        first, pair = int(regs[k][1:]), regs[k + 1:k + 2]
        x = first - 19
        if k == 0:
            z = save_size // 8 - 1
            if pair and pair[0] != "x30":
                run.append(_op("save_regp_x", 0xCC | x >> 2, (x & 3) << 6 | z))
            elif pair:                          # x19, lr first: no pre-indexed lr pair opcode
                raise _fail("packed RegI=1 CR=1 is not evaluated yet")
            else:
                run.append(_op("save_reg_x", 0xD4 | x >> 3, (x & 7) << 5 | z))
            continue
        off = 8 * k // 8
        if pair and pair[0] == "x30":
            run.append(_op("save_lrpair", 0xD6 | (x // 2) >> 2, ((x // 2) & 3) << 6 | off))
        elif pair:
            run.append(_op("save_regp", 0xC8 | x >> 2, (x & 3) << 6 | off))
        else:
            run.append(_op("save_reg", 0xD0 | x >> 2, (x & 3) << 6 | off))
    run += _alloc(p.frame_size - save_size)
    return list(reversed(run))
