"""The unwind row every table source is translated into.

A Row says, for one address range of a function, how to find the canonical
frame address (CFA) and how to recover each register of the caller. DWARF
CFI produces Rows directly; SFrame, compact unwind and frame-pointer rules
are expressed as Rows too, so one evaluator (plugin/strategies/evaluate.py) and one
renderer serve them all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from plugin.model.vocabulary import Vocabulary


class RuleKind(Vocabulary):
    """How one register of the caller is recovered (DWARF's register rules)."""
    UNDEFINED = ("undefined", "the register has no value in the caller (for the return address: outermost frame)")
    SAME = ("same", "the caller's value is the callee's: the register is unchanged")
    OFFSET = ("offset", "the value is saved at CFA + offset")
    VAL_OFFSET = ("val_offset", "the value is CFA + offset")
    REGISTER = ("register", "the value is in another register")
    EXPRESSION = ("expression", "the value is saved at the address a DWARF expression computes")
    VAL_EXPRESSION = ("val_expression", "the value is what a DWARF expression computes")


class CfaKind(Vocabulary):
    """How the CFA is computed."""
    REGISTER = ("register", "a register plus an offset (SFrame's flex form may dereference it)")
    EXPRESSION = ("expression", "what a DWARF expression computes")


def _bytes_text(expression, arch) -> str:
    return "DWARF expression %s" % bytes(expression).hex()


# How a rule's DWARF expression is shown (expression bytes, arch -> text). The model is below
# the formats, so plugin.formats.dwarf_expr installs its disassembler here when it is imported
# (plugin/formats/__init__.py imports it, so every decoder that makes an expression rule has);
# until then the bytes are shown in hex.
_expression_texts = [_bytes_text]


def show_expressions_with(disassemble: Callable[[bytes, object], str]) -> None:
    """Install the function that shows a rule's DWARF expression (plugin.formats.dwarf_expr)."""
    _expression_texts[0] = disassemble


def _expression_text(expression, arch) -> str:
    return _expression_texts[0](expression, arch)


@dataclass(frozen=True)
class Rule:
    """How to recover one register of the caller."""
    kind: RuleKind
    offset: int = 0
    register: int = None
    expression: bytes = b""

    def text(self, arch):
        if self.kind == RuleKind.UNDEFINED:
            return "undefined"
        if self.kind == RuleKind.SAME:
            return "same"
        if self.kind == RuleKind.OFFSET:
            return "[CFA%+d]" % self.offset
        if self.kind == RuleKind.VAL_OFFSET:
            return "CFA%+d" % self.offset
        if self.kind == RuleKind.REGISTER:
            return arch.name_of(self.register)
        if self.kind == RuleKind.EXPRESSION:
            return "[%s]" % _expression_text(self.expression, arch)
        return "(%s)" % _expression_text(self.expression, arch)

    def to_json(self, arch):
        out = {"kind": self.kind}
        if self.kind in (RuleKind.OFFSET, RuleKind.VAL_OFFSET):
            out["offset"] = self.offset
        elif self.kind == RuleKind.REGISTER:
            out["register"] = arch.name_of(self.register)
        elif self.kind in (RuleKind.EXPRESSION, RuleKind.VAL_EXPRESSION):
            out["expression"] = self.expression.hex()
        return out


@dataclass(frozen=True)
class CfaRule:
    """How to compute the CFA: register + offset, or a DWARF expression.

    `deref` marks the SFrame flex form `CFA = *(reg + offset)`; `added` is added
    after that dereference (ORC's SP_INDIRECT since v5.12: the word at sp, plus
    sp_offset).
    """
    kind: CfaKind
    register: int = None
    offset: int = 0
    expression: bytes = b""
    deref: bool = False
    added: int = 0

    def text(self, arch):
        if self.kind == CfaKind.EXPRESSION:
            return "(%s)" % _expression_text(self.expression, arch)
        base = "%s%+d" % (arch.name_of(self.register), self.offset) if self.offset else arch.name_of(self.register)
        if not self.deref:
            return base
        return "*(%s)%+d" % (base, self.added) if self.added else "*(%s)" % base

    def to_json(self, arch):
        if self.kind == CfaKind.EXPRESSION:
            return {"kind": CfaKind.EXPRESSION, "expression": self.expression.hex()}
        out = {"kind": CfaKind.REGISTER, "register": arch.name_of(self.register), "offset": self.offset}
        if self.deref:
            out["deref"] = True
        if self.added:
            out["added"] = self.added
        return out


@dataclass
class Row:
    """Rules in force from `address` up to (not including) `end`."""
    address: int
    cfa: CfaRule
    registers: dict = field(default_factory=dict)   # DWARF number -> Rule
    end: int = None
    args_size: int = 0
    ra_signed: bool = False     # aarch64: return address signed with PAC here
    note: str = ""              # how the decoder read something unusual in this row

    def text(self, arch):
        """`CFA=rsp+16 => rbp=[CFA-16] rip=[CFA-8]`"""
        regs = " ".join("%s=%s" % (arch.name_of(n), r.text(arch))
                        for n, r in sorted(self.registers.items()))
        out = "CFA=%s" % self.cfa.text(arch)
        return out + (" => " + regs if regs else "") + (" (%s)" % self.note if self.note else "")

    def to_json(self, arch):
        out = {"address": self.address, "cfa": self.cfa.to_json(arch),
               "registers": {arch.name_of(n): r.to_json(arch)
                             for n, r in sorted(self.registers.items())}}
        if self.end is not None:
            out["end"] = self.end
        if self.ra_signed:
            out["ra_signed"] = True
        if self.note:
            out["note"] = self.note
        return out
