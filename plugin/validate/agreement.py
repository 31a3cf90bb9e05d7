"""Do two unwind rows say the same thing about CFA, FP and RA?

Used by `unwind tables` to set an SFrame row beside the CFI row in force at
the same address. The rows are not compared as text: CFI may say
`CFA = DW_OP_breg6 -16; DW_OP_deref` where SFrame says `CFA = *(rbp-16)`,
or compute a PLT's CFA with an expression over rip where SFrame repeats two
rows every 16 bytes. Instead both rows are evaluated on the same made-up
registers and memory (every word of memory a different function of its
address), twice with different values; two rules agree when they give the
same value both times.

FP and RA are compared with the SFrame row's CFA replaced by the CFI's, so
each item is judged on its own: a wrong CFA is one disagreement, not three.
"""

import dataclasses

from plugin.errors import MemoryReadError
from plugin.model.rules import RuleKind
from plugin.strategies.evaluate import RowError, evaluate_row

# Two made-up machine states: register n holds BASE + n * STRIDE, the stack
# pointer a plausible aligned stack address, memory word at a = f(a).
_STATES = ((0x1111000000, 0x10000, 0x7ffc00001000, 0x9E3779B97F4A7C15),
           (0x2222000000, 0x20000, 0x7ffd00042000, 0xC2B2AE3D27D4EB4F))


def _state(arch, address, base, stride, sp, multiplier):
    registers = {n: (base + n * stride) & arch.mask for n in arch.registers}
    registers[arch.sp] = sp
    registers[arch.pc] = address
    if arch.ra != arch.pc:
        registers[arch.ra] = (base + 0x4242) & arch.mask

    def read_memory(addr, size):
        value = ((addr * multiplier) ^ (addr >> 7)) & ((1 << (8 * size)) - 1)
        return value.to_bytes(size, arch.byteorder)
    return registers, read_memory


def _evaluate(row, arch, address):
    """[(cfa, {fp, ra}, undefined)] per state, or a string saying why not."""
    out = []
    for base, stride, sp, multiplier in _STATES:
        registers, read_memory = _state(arch, address, base, stride, sp, multiplier)
        try:
            result = evaluate_row(row, arch, registers, read_memory)
        except (RowError, MemoryReadError) as exc:
            return getattr(exc, "reason", str(exc))
        out.append((result.cfa, {arch.fp: result.registers.get(arch.fp),
                                 arch.ra: result.registers.get(arch.ra)}, result.undefined))
    return out


def _rule_text(row, number, arch):
    rule = row.registers.get(number)
    if rule is None:
        return "same (no rule)"
    return rule.text(arch)


def compare(cfi_row, sframe_row, arch, address):
    """{"address", "agree", "cfa", "fp", "ra"}; each item {"agree", "cfi", "sframe", "detail"}.

    An item's agree is null when it cannot be compared (the SFrame row marks
    an outermost frame and so describes no CFA, or a rule cannot be
    evaluated); the overall agree is true when no item disagrees.
    """
    ours = _evaluate(cfi_row, arch, address)
    theirs = _evaluate(sframe_row, arch, address)
    theirs_on_our_cfa = _evaluate(dataclasses.replace(sframe_row, cfa=cfi_row.cfa), arch, address)
    fp, ra = arch.fp, arch.ra
    sframe_outermost = ra in sframe_row.registers and sframe_row.registers[ra].kind == RuleKind.UNDEFINED
    items = {
        "cfa": {"cfi": cfi_row.cfa.text(arch), "sframe": sframe_row.cfa.text(arch)},
        "fp": {"cfi": _rule_text(cfi_row, fp, arch), "sframe": _rule_text(sframe_row, fp, arch)},
        "ra": {"cfi": _rule_text(cfi_row, ra, arch) + (" (signed)" if cfi_row.ra_signed else ""),
               "sframe": _rule_text(sframe_row, ra, arch) + (" (signed)" if sframe_row.ra_signed else "")},
    }
    for key, item in items.items():
        if isinstance(ours, str) or isinstance(theirs, str) or isinstance(theirs_on_our_cfa, str):
            item["agree"] = None
            item["detail"] = "cannot evaluate the %s row: %s" % (
                "CFI" if isinstance(ours, str) else "SFrame", ours if isinstance(ours, str) else theirs)
            continue
        if key != "ra" and sframe_outermost:
            item["agree"] = None
            item["detail"] = "the SFrame row marks an outermost frame and describes no %s" % key.upper()
            continue
        if key == "cfa":
            same = [a[0] for a in ours] == [b[0] for b in theirs]
        else:
            number = fp if key == "fp" else ra
            same = [(a[1][number], number in a[2]) for a in ours] == \
                   [(b[1][number], number in b[2]) for b in theirs_on_our_cfa]
            if key == "ra" and cfi_row.ra_signed != sframe_row.ra_signed:
                same = False
        item["agree"] = same
        item["detail"] = ("same value" if same else "differ: CFI says %s, SFrame says %s"
                          % (item["cfi"], item["sframe"]))
    agree = all(item["agree"] is not False for item in items.values())
    return dict(address=address, agree=agree, **items)


def text(agreement):
    """One line per item, for `unwind tables`."""
    head = "CFI and SFrame at 0x%x: %s" % (
        agreement["address"], "agree" if agreement["agree"] else "DISAGREE")
    lines = [head]
    for key in ("cfa", "fp", "ra"):
        item = agreement[key]
        mark = {True: "agree", False: "DIFFER", None: "not compared"}[item["agree"]]
        lines.append("  %-3s %-12s CFI %s | SFrame %s%s" % (
            key.upper(), mark, item["cfi"], item["sframe"],
            "" if item["agree"] else " (%s)" % item["detail"]))
    return "\n".join(lines)

