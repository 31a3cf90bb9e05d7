"""A kernel image's ORC rows checked offline against its code (`python -m plugin validate vmlinux`).

ORC (objtool) writes a row wherever the frame's state changes, so between two
rows the state is constant, and the last instruction before a row that falls
into it is the one that changed it. Each pair of adjacent rows is judged with
the instruction analysis' effects (plugin.analysis decodes; here only the
stack and frame pointers are followed, as offsets from the CFA):

- every instruction of a row's range that goes on to the next instruction
  leaves the row's state as it found it (rsp for an sp-based CFA, rbp for a
  bp-based one); one that ends its path (jmp, ret, ud2) starts the next with
  the row's state again, as objtool requires of code reached by a jump;
- the last instruction, when it falls into the next row, leaves that row's
  state: CFA sp+N or bp+N, and where it saves rbp (`push rbp` with the caller's
  rbp still in place), the next row says rbp is saved there.

Only what the analysis can decide is judged; everything else is `undecided`
with its reason: rows other than CALL (objtool's REGS and REGS_PARTIAL rows
come from UNWIND_HINTs in entry code, undefined and end-of-stack rows mark
code no unwinder walks), CFA rules other than sp+N and bp+N (SP_INDIRECT,
the IRQ stack; dx/di/r10/r13), ranges whose instructions do not end at the
next row on disk (alternatives and paravirt sites, patched at boot), and
instructions whose effect on rsp the analysis does not give (pushf/popf, rsp
loaded or aligned).
"""
from __future__ import annotations

import collections
import io
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from plugin.analysis.ops import Flow
from plugin.formats import orc
from plugin.formats.orc import OrcEntry, OrcReg, OrcType
from plugin.validate import code as checks

SP, BP, TEMP = 7, 6, -1         # the analysis' register numbers (DWARF) and its temporary
ENDS_PATH = (Flow.JUMP, Flow.RET, Flow.STOP, Flow.INDIRECT)
MAX_RANGE = 1 << 16             # bytes of one row's range decoded at most
DECODED_KEPT = 100000           # instructions decoded before the decoder's cache is dropped
UNMODELLED = ("pushf", "popf")  # they move rsp; the analysis gives them no effect
RETURNS = ("iret", "sysret", "sysexit")     # they end the path; the analysis lets them fall through


@dataclass
class OrcReport:
    rows: int = 0
    right: int = 0
    wrong: int = 0
    undecided: int = 0
    reasons: Dict[str, int] = field(default_factory=collections.Counter)   # undecided rows by reason
    instructions: checks.SourceSummary = field(default_factory=checks.SourceSummary)
    disagreements: List[checks.Disagreement] = field(default_factory=list)
    seconds: float = 0.0

    def text(self) -> str:
        lines = ["ORC rows: %d checked: %d right, %d wrong, %d undecided (%.1f s)"
                 % (self.rows, self.right, self.wrong, self.undecided, self.seconds)]
        for reason, count in sorted(self.reasons.items(), key=lambda item: -item[1]):
            lines.append("  undecided: %d %s" % (count, reason))
        return "\n".join(lines)


Value = Optional[int]           # a register's value as an offset from the CFA, None: unknown


def _value(expr, regs: Dict[int, Value]) -> Value:
    kind = expr[0]
    if kind == "reg":
        return regs.get(expr[1])
    if kind == "add":
        inner = _value(expr[1], regs)
        return None if inner is None else inner + expr[2]
    return None


def _apply(insn, regs: Dict[int, Value]) -> Optional[int]:
    """Apply the instruction's effects to regs (rsp, rbp, the temporary); the CFA offset of the slot
    rbp is stored to while rbp is still the caller's (regs[BP] is the marker "caller"), else None."""
    saved_at = None
    for effect in insn.effects:
        if effect[0] == "store" and effect[3] == ("reg", BP) and regs.get("bp caller"):
            saved_at = _value(effect[1], regs)
        elif effect[0] == "set" and effect[1] in (SP, BP, TEMP):
            regs[effect[1]] = _value(effect[2], regs)
            if effect[1] == BP:
                regs["bp caller"] = False
        elif effect[0] == "set":
            regs[effect[1]] = None
    return saved_at


def _start_state(entry: OrcEntry) -> Optional[Dict]:
    if entry.sp_reg == OrcReg.SP:
        return {SP: -entry.sp_offset, "bp caller": entry.bp_reg == OrcReg.UNDEFINED}
    if entry.sp_reg == OrcReg.BP:
        return {BP: -entry.sp_offset, "bp caller": False}
    return None


def _holds(entry: OrcEntry, regs: Dict) -> Optional[bool]:
    """Does the state give entry's CFA rule? None: the analysis cannot say."""
    reg = SP if entry.sp_reg == OrcReg.SP else BP
    value = regs.get(reg)
    return None if value is None else value == -entry.sp_offset


def judge(cur: OrcEntry, nxt: OrcEntry, decode: Callable) -> Tuple[str, str, list]:
    """(verdict "right"/"wrong"/"undecided", reason or what is wrong, [(insn, verdict)]) for cur's range."""
    if cur.type is not OrcType.CALL:
        return "undecided", "%s row (objtool's hints; not judged)" % cur.type.value, []
    regs = _start_state(cur)
    if regs is None:
        return "undecided", "CFA rule %s" % orc.reg_text(cur.sp_reg, cur.sp_offset), []
    if nxt.ip - cur.ip > MAX_RANGE:
        return "undecided", "a range longer than %d bytes" % MAX_RANGE, []
    judged, pc, moved = [], cur.ip, False
    while pc < nxt.ip:
        insn = decode(pc)
        if insn is None:
            return "undecided", "code not decoded", judged
        if insn.end > nxt.ip:
            return "undecided", "instructions do not end at the next row (a site patched at boot)", judged
        if insn.text.startswith(UNMODELLED):
            return "undecided", "pushf/popf (no effect in the analysis)", judged
        saved_at = _apply(insn, regs)
        last = insn.end == nxt.ip
        if insn.flow in ENDS_PATH or insn.text.startswith(RETURNS):
            judged.append((insn, "right"))
            if last and moved:
                return "undecided", "the frame moves inside one row (a site patched at boot)", judged
            if last:
                return "right", "", judged      # nothing falls into the next row
            regs = _start_state(cur)
        elif not last:
            holds = _holds(cur, regs)
            if holds is None:
                return "undecided", "%s: a value the analysis does not follow" % insn.text, judged
            judged.append((insn, "right" if holds else "wrong"))
            moved = moved or not holds
        elif moved:
            # the frame moved and came back (or not) inside one row: objtool saw other instructions
            # there (an alternative or paravirt site, patched at boot)
            return "undecided", "the frame moves inside one row (a site patched at boot)", judged[:-1]
        else:
            return _transition(cur, nxt, insn, regs, saved_at, judged)
        pc = insn.end
    return "undecided", "code not decoded", judged


def _transition(cur, nxt, insn, regs, saved_at, judged):
    if nxt.type is not OrcType.CALL or nxt.sp_reg not in (OrcReg.SP, OrcReg.BP):
        return "undecided", "the next row is %s, %s" % (nxt.type.value, orc.reg_text(nxt.sp_reg, nxt.sp_offset)), \
            judged
    holds = _holds(nxt, regs)
    if holds is None:
        return "undecided", "%s: a value the analysis does not follow" % insn.text, judged
    if not holds and insn.flow == Flow.CALL:
        return "undecided", "a call ends the range: its callee may not return (no symbols say)", judged
    if not holds and any(i.text == "nop" or i.text.startswith("nop ") for i, _ in judged + [(insn, "")]):
        return "undecided", "a nop in the range: a site patched at boot", judged
    if not holds:
        judged.append((insn, "wrong"))
        return "wrong", "after %s the CFA is not %s" % (insn.text, orc.reg_text(nxt.sp_reg, nxt.sp_offset)), judged
    if saved_at is not None and (nxt.bp_reg, nxt.bp_offset) != (OrcReg.PREV_SP, saved_at):
        judged.append((insn, "wrong"))
        return "wrong", "%s saves rbp at CFA%+d, the row says %s" % (
            insn.text, saved_at, orc.reg_text(nxt.bp_reg, nxt.bp_offset)), judged
    judged.append((insn, "right"))
    return "right", "", judged


def check(entries: List[OrcEntry], decode: Callable, name: Callable[[int], str] = hex,
          select: Optional[Callable[[int, int], bool]] = None) -> OrcReport:
    """Judge each pair of adjacent rows (entries sorted by ip; those whose range select(start, end) accepts);
    decode(pc) -> the analysis' Insn or None."""
    began = time.perf_counter()
    report = OrcReport()
    summary = report.instructions
    for cur, nxt in zip(entries, entries[1:]):
        if select is not None and not select(cur.ip, nxt.ip):
            continue
        report.rows += 1
        verdict, why, judged = judge(cur, nxt, decode)
        for _, insn_verdict in judged:
            summary.checked += 1
            key = "unknown" if verdict == "undecided" else insn_verdict
            setattr(summary, key, getattr(summary, key) + 1)
        if verdict == "right":
            report.right += 1
        elif verdict == "wrong":
            report.wrong += 1
            insn = judged[-1][0]
            report.disagreements.append(checks.Disagreement(
                insn.address, name(cur.ip), "orc", insn.text, "%s -> %s" % (orc.entry_text(cur), orc.entry_text(nxt)),
                why, [checks.Finding("bp" if "saves rbp" in why else "cfa", checks.Verdict.WRONG,
                                     orc.entry_text(nxt), why)]))
        else:
            report.undecided += 1
            report.reasons[why.split(":")[0] if ": a value" in why else why] += 1
    report.seconds = time.perf_counter() - began
    return report


def check_file(path: str, arch, read: Callable[[int, int], bytes], select=None) -> Optional[OrcReport]:
    """The ORC rows of the ELF file at path (a vmlinux), or None when it has no ORC sections."""
    from elftools.elf.elffile import ELFFile

    from plugin.analysis import CodeAnalysis
    from plugin.file_targets.orc import OrcImage
    with open(path, "rb") as handle:
        data = handle.read()
    image = OrcImage(ELFFile(io.BytesIO(data)), data)
    if not image.found:
        return None
    fresh = {"decoded": 0, "analysis": None}

    def decode(pc):
        # a new analysis now and then: its cache of decoded instructions would hold the whole kernel
        if fresh["decoded"] % DECODED_KEPT == 0:
            fresh["analysis"] = CodeAnalysis(arch, read)
        fresh["decoded"] += 1
        return fresh["analysis"].decode_at(pc)
    return check(sorted(image.entries(), key=lambda e: e.ip), decode, select=select)


def add_to(report, target, module, select=None) -> None:
    """A module's ORC rows into its validate report (x86-64 ELF files with ORC sections)."""
    if module.arch.name != "x86_64" or module.format != "elf" or not module.path:
        return
    from plugin.errors import bad_file_errors
    from plugin.modules import on_disk
    try:
        if ".orc_unwind_ip" not in on_disk.sections(module.path):
            return      # not a kernel image: its file is not read again
    except bad_file_errors():
        return          # the file's own problems are reported by the other checks
    found = check_file(module.path, module.arch, target.read_memory, select)
    if found is None:
        return
    report.sources["orc"] = found.instructions
    report.disagreements.extend(found.disagreements)


if __name__ == "__main__":     # python -m plugin.validate.orc VMLINUX: the rows' figures, undecided by reason
    import sys

    from plugin.file_targets import load
    target, modules = load(sys.argv[1])
    for module in modules.all():
        found = check_file(module.path, module.arch, target.read_memory) if module.path else None
        print(found.text() if found is not None else "%s: no ORC sections" % module.name)
