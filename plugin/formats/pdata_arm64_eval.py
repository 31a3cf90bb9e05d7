"""The caller's registers at a pc, by ARM64 Windows unwind data, as Windows
unwinds them: in the prologue only the opcodes of the instructions already run
apply (prologue opcodes are listed last-run first, one per instruction); in an
epilogue scope (or the packed epilogue at the function's end) the opcodes of
the instructions not yet run apply; elsewhere the whole prologue.

A pure function over read_memory(address, size) and a dict of registers
("x0".."x30", "sp", "pc"). Packed entries are turned into their equivalent
prologue opcodes (plugin.formats.pdata_arm64_packed.canonical); unknown opcodes raise DecodeError, as do
save_next, save_any_reg, alloc_z and the Microsoft frame opcodes (not evaluated
yet). Saved d registers are reported as addresses.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List

from plugin.errors import DecodeError, DecodeKind
from plugin.formats import pdata_arm64 as a64
from plugin.formats.pdata_arm64_packed import canonical

ReadMemory = Callable[[int, int], bytes]


@dataclass
class CallerFrame:
    cfa: int                                   # the caller's sp
    pc: int                                    # the return address (lr)
    registers: Dict[str, int]
    saved_at: Dict[str, int] = field(default_factory=dict)
    cfa_register: str = "sp"                   # the callee register the CFA was computed from


def _fail(cause: str, kind: DecodeKind) -> DecodeError:
    return DecodeError("arm64 unwind", None, cause, kind)


def _apply(ops: List[a64.Opcode], regs: Dict[str, int], read_memory: ReadMemory) -> Dict[str, int]:
    """Run opcodes (in unwinding order) over regs; the addresses registers were read from."""
    saved: Dict[str, int] = {}

    def load(name: str, address: int) -> None:
        data = read_memory(address, 8)
        if data is None or len(data) < 8:
            raise _fail("cannot read 8 bytes at 0x%x" % address, DecodeKind.UNREADABLE)
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
            raise _fail("opcode %s (%s) is not evaluated yet" % (name, op.raw.hex()), DecodeKind.UNSUPPORTED)
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
        prologue, epilogue = canonical(entry.packed)
        if entry.flag == a64.PdataFlag.FRAGMENT:
            saved = _apply(prologue, regs, read_memory)
            base = "x29" if any(op.name == "set_fp" for op in prologue) else "sp"
            return CallerFrame(regs["sp"], regs["x30"], regs, saved, base)
        length = entry.packed.function_length
        epilogues = [(length - 4 * (len(epilogue) + 1), epilogue)]
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
