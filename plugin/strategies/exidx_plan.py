"""EHABI unwind opcodes run symbolically into a Row (the `exidx` source's plan: an OpcodeRun).

Every value is a callee register plus an offset, or a word loaded from such
an address: the CFA is the final vsp; each popped register is saved at
CFA+n, or at an address a DWARF expression computes when a `vsp = r[n]`
came between. The caller's pc is the popped r15 if there was one, else
r14 (the `finish` rule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from plugin.formats import exidx
from plugin.formats.exidx_ops import LR, PC, SP, OpKind
from plugin.leb128 import encode_sleb
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

_DW_OP_BREG0, _DW_OP_DEREF, _DW_OP_CONSTS, _DW_OP_PLUS, _DW_OP_DROP = 0x70, 0x06, 0x11, 0x22, 0x13


@dataclass
class OpcodeRun:
    """An entry's opcodes run symbolically: the Row, and what each instruction did."""
    row: Row
    effects: List[str]              # one sentence per executed instruction
    pc_from: int                    # PC (popped) or LR (the finish rule)
    skipped: List[str]              # VFP/iWMMXt pops: stepped over, registers not tracked
    refused: bool                   # a "refuse to unwind" instruction was reached


# -- symbolic values: (base, offset); base is ("reg", n) or ("load", value) ----------

def _reg(n, offset=0):
    return (("reg", n), offset)


def _plus(value, k):
    return (value[0], value[1] + k)


def _text(value, arch):
    base, k = value
    core = arch.name_of(base[1]) if base[0] == "reg" else "[%s]" % _text(base[1], arch)
    return "%s%+d" % (core, k) if k else core


def _expression(value):
    base, k = value
    if base[0] == "reg" and base[1] < 32:
        return bytes([_DW_OP_BREG0 + base[1]]) + encode_sleb(k)
    out = _expression(base[1]) + bytes([_DW_OP_DEREF])
    if k:
        out += bytes([_DW_OP_CONSTS]) + encode_sleb(k) + bytes([_DW_OP_PLUS])
    return out


def plan(unwind: exidx.UnwindEntry, arch, start: int, end: int) -> OpcodeRun:
    """The OpcodeRun of a decoded UnwindEntry for the range [start, end)."""
    vsp = _reg(SP)
    saved = {}                      # core register -> address value it was popped from
    effects, skipped = [], []
    refused = False
    for ins in unwind.instructions:
        kind = ins.kind
        if kind == OpKind.FINISH:
            effects.append("finish: stop")
            break
        if kind == OpKind.REFUSE:
            refused = True
            effects.append("refuse to unwind")
            break
        if kind == OpKind.VSP_ADD:
            vsp = _plus(vsp, ins.amount)
            effects.append("vsp = %s" % _text(vsp, arch))
        elif kind == OpKind.VSP_SUB:
            vsp = _plus(vsp, -ins.amount)
            effects.append("vsp = %s" % _text(vsp, arch))
        elif kind == OpKind.VSP_FROM_REGISTER:
            n = ins.register
            vsp = (("load", saved[n]), 0) if n in saved else _reg(n)
            effects.append("vsp = %s = %s" % (arch.name_of(n), _text(vsp, arch)))
        elif kind == OpKind.POP:
            parts, slot = [], vsp
            for n in ins.registers:
                saved[n] = slot
                parts.append("%s from [%s]" % (arch.name_of(n), _text(slot, arch)))
                slot = _plus(slot, 4)
            vsp = (("load", saved[SP]), 0) if SP in ins.registers else slot
            effects.append("%s; vsp = %s" % (", ".join(parts), _text(vsp, arch)))
        else:
            skipped.append(ins.text())
            vsp = _plus(vsp, ins.amount)
            effects.append("%s skipped (not tracked): %d bytes; vsp = %s" % (ins.text(), ins.amount,
                                                                              _text(vsp, arch)))
    registers = {}
    for n, where in saved.items():
        if n == SP:
            continue                # the caller's sp is the CFA
        if where[0] == vsp[0]:
            registers[n] = Rule(RuleKind.OFFSET, offset=where[1] - vsp[1])
        else:
            registers[n] = Rule(RuleKind.EXPRESSION, expression=bytes([_DW_OP_DROP]) + _expression(where))
    registers.setdefault(LR, Rule(RuleKind.SAME))
    base, k = vsp
    if base[0] == "reg":
        cfa = CfaRule(CfaKind.REGISTER, register=base[1], offset=k)
    elif k == 0 and base[1][0][0] == "reg":
        cfa = CfaRule(CfaKind.REGISTER, register=base[1][0][1], offset=base[1][1], deref=True)
    else:
        cfa = CfaRule(CfaKind.EXPRESSION, expression=_expression(vsp))
    row = Row(address=start, cfa=cfa, registers=registers, end=end)
    return OpcodeRun(row, effects, PC if PC in saved else LR, skipped, refused)


def at_entry(entry: Optional[exidx.IndexEntry], arch, pc=None, why=None) -> OpcodeRun:
    """The OpcodeRun where nothing is saved (the function's first instruction, or `why`): CFA = sp,
    the return address in lr."""
    pc = entry.function if pc is None else pc
    row = Row(address=pc, cfa=CfaRule(CfaKind.REGISTER, register=SP, offset=0),
              registers={LR: Rule(RuleKind.SAME)}, end=pc + 1)
    note = ("%s: nothing is saved, so CFA = %s and the return address is in %s (the opcodes "
            "describe the body, after the prologue)" % (why or "the pc is the function's first instruction",
                                                        arch.name_of(SP), arch.name_of(LR)))
    return OpcodeRun(row, [note], LR, [], False)
