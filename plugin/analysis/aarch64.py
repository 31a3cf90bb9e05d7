"""AArch64 instruction patterns, declared once: capstone's text to effects.

stp/ldp/str/ldr (pre-index `[sp, #-n]!`, post-index `[sp], #n`, plain
offset), add/sub/mov of sp and x29, `and sp` realignment, branches,
calls (bl/blr: x30 and x0-x18 clobbered), returns, and the pointer-auth
hints (which leave x30 the caller's, signed).
"""
from __future__ import annotations

from plugin.analysis.ops import OTHER, Flow, Insn, add, after_syscall, immediate, operands, reg

CAPSTONE = ("CS_ARCH_ARM64", "CS_MODE_ARM")
SP, FP, RA = 31, 29, 30
SYSCALL_NUMBER = 8                  # x8: the number of the system call `svc` makes
ENTRY_SP = 0                        # at entry sp is the CFA ...
ENTRY_SLOTS = {}                    # ... nothing is stored yet ...
RA_REGISTER = 30                    # ... and the return address is in x30
CALLEE_SAVED = tuple(range(19, 30)) + tuple(range(72, 80))
CALL_CLOBBERED = tuple(range(0, 19))
POINTER_SIZE = 8
PC_THUNKS = False                   # no pc thunks
PLT_PADDING = ("nop",)                              # between PLT stubs
INTERWORKING = False                # code addresses are exact (no Thumb bit)
CALLEE_POPS = False                 # no callee pops its arguments (`ret N`)
DIRECT_CALL_SIZES = (4,)                # the length of a direct call: `bl`
PADDING = ("nop", "udf #0")         # what compilers and linkers fill the gaps between functions with

REGISTERS = {"sp": (31, True, 8), "wsp": (31, False, 4)}   # name -> (DWARF number, full, size)
for _n in range(31):
    REGISTERS["x%d" % _n] = (_n, True, 8)
    REGISTERS["w%d" % _n] = (_n, False, 4)
for _n in range(32):
    REGISTERS["d%d" % _n] = (64 + _n, True, 8)       # d8-d15: the callee-saved half of v8-v15
    for _prefix, _size in (("q", 16), ("s", 4), ("h", 2), ("b", 1), ("v", 16)):
        REGISTERS["%s%d" % (_prefix, _n)] = (64 + _n, False, _size)
REGISTERS.update({"fp": (29, True, 8), "lr": (30, True, 8)})

_NO_WRITE = frozenset(("cmp", "cmn", "tst", "ccmp", "ccmn", "fcmp", "fcmpe", "fccmp", "fccmpe",
                       "prfm", "prfum", "dmb", "dsb", "isb", "nop", "hint", "yield", "paciasp",
                       "autiasp", "pacibsp", "autibsp", "paciaz", "autiaz", "pacibz", "autibz",
                       "xpaclri", "bti", "csdb", "sb", "clrex", "sev", "sevl", "wfe", "wfi", "msr",
                       "dc", "ic", "tlbi", "at", "esb", "psb"))
_STOPS = frozenset(("brk", "udf", "hlt"))
_BRANCHES = ("cbz", "cbnz", "tbz", "tbnz")
_ATOMICS = ("swp", "cas", "ldadd", "ldclr", "ldeor", "ldset", "ldsmax", "ldsmin", "ldumax", "ldumin")


def is_padding(text: str) -> bool:
    """Is the instruction (capstone's text) alignment padding between functions?"""
    return text in PADDING


def _address(text, rest):
    """(address expression, writeback expression or None) of a memory operand and what follows it."""
    pre = text.endswith("!")
    inner = text.rstrip("!").strip("[]")
    parts = [p.strip() for p in inner.split(",")]
    base = REGISTERS.get(parts[0])
    if base is None or not base[1]:
        return ("unknown", "address %s" % text), None
    offset = 0
    if len(parts) > 1:
        offset = immediate(parts[1])
        if offset is None:
            return ("indexed",), None        # register offset: an array, not a saved slot
    address = add(reg(base[0]), offset)
    if pre:
        return address, (base[0], address)
    if rest:
        post = immediate(rest[0])
        if post is not None:
            return reg(base[0]), (base[0], add(reg(base[0]), post))
    return address, None


def _reg(text):
    return REGISTERS.get(text.strip())


def decode(address, size, mnemonic, op_str):
    insn = Insn(address, size, ("%s %s" % (mnemonic, op_str)).strip())
    ops = operands(op_str) if op_str else []
    if mnemonic in ("stp", "stnp", "str", "stur", "strb", "strh", "sturb", "sturh", "stlr", "stlur") \
            and len(ops) >= 2:
        _store(insn, mnemonic, ops)
    elif mnemonic in ("ldp", "ldnp", "ldr", "ldur", "ldrb", "ldrh", "ldrsw", "ldrsb", "ldrsh",
                      "ldurb", "ldurh", "ldursw", "ldar", "ldapr") and len(ops) >= 2:
        _load(insn, mnemonic, ops)
    elif mnemonic == "mov" and len(ops) == 2:
        dst, src = _reg(ops[0]), _reg(ops[1])
        if dst is not None:
            value = reg(src[0]) if src is not None and src[1] and dst[1] else OTHER
            if src is None and dst[0] == SYSCALL_NUMBER and ops[1].startswith("#"):
                value = ("addr", immediate(ops[1]))     # which system call: a clone's, maybe
            _set(insn, dst, value)
    elif mnemonic in ("add", "sub") and len(ops) >= 3:
        dst, src = _reg(ops[0]), _reg(ops[1])
        k = immediate(ops[2])
        if k is not None and len(ops) == 4 and ops[3].startswith("lsl"):
            k <<= immediate(ops[3][3:]) or 0
        if dst is not None and src is not None and k is not None and dst[1] and src[1]:
            _set(insn, dst, add(reg(src[0]), k if mnemonic == "add" else -k))
        elif dst is not None:
            _set(insn, dst, OTHER, "%s: stack adjusted by an unknown amount" % insn.text)
    elif mnemonic == "and" and len(ops) == 3 and _reg(ops[0]) == REGISTERS["sp"]:
        src, mask = _reg(ops[1]), immediate(ops[2])
        if src is not None and mask is not None and mask >= 1 << 63 and ((1 << 64) - mask) & ((1 << 64) - mask - 1) == 0:
            insn.effects.append(("set", SP, ("align", reg(src[0]), address)))
        else:
            insn.effects.append(("set", SP, ("unknown", "%s: unknown realignment" % insn.text)))
    elif mnemonic in ("adrp", "adr") and len(ops) == 2 and _reg(ops[0]) is not None:
        value = immediate(ops[1])
        insn.effects.append(("set", _reg(ops[0])[0], ("addr", value) if value is not None else OTHER))
    elif mnemonic in ("ret", "retaa", "retab"):
        insn.flow = Flow.RET
    elif mnemonic == "bl":
        insn.flow, insn.target = Flow.CALL, immediate(ops[0])
    elif mnemonic in ("blr", "blraa", "blrab", "blraaz", "blrabz"):
        insn.flow = Flow.CALL
    elif mnemonic == "b":
        insn.flow, insn.target = Flow.JUMP, immediate(ops[0])
    elif mnemonic.startswith("b.") or mnemonic in _BRANCHES:
        insn.flow, insn.target = Flow.BRANCH, immediate(ops[-1])
    elif mnemonic in ("br", "braa", "brab", "braaz", "brabz"):
        insn.flow = Flow.INDIRECT
        target = _reg(ops[0])
        insn.indirect = reg(target[0]) if target is not None else ("unknown", insn.text)
    elif mnemonic in _STOPS:
        insn.flow = Flow.STOP
    elif mnemonic == "svc":
        insn.effects.append(after_syscall("aarch64", SP, SYSCALL_NUMBER))
        insn.effects.append(("set", 0, OTHER))
    else:
        _generic(insn, mnemonic, ops)
    return insn


def _set(insn, dst, value, sp_reason=None):
    if dst[0] == SP and (value == OTHER or not dst[1]):
        value = ("unknown", sp_reason or "%s writes the stack pointer" % insn.text)
    elif not dst[1]:
        value = OTHER
    insn.effects.append(("set", dst[0], value))


def _transfer(mnemonic, ops):
    """(registers, memory operand text, operands after it, bytes per register)."""
    pair = mnemonic in ("stp", "stnp", "ldp", "ldnp")
    count = 2 if pair else 1
    regs = [_reg(o) for o in ops[:count]]
    size = {"b": 1, "h": 2}.get(mnemonic[-1]) if mnemonic[-1] in "bh" and mnemonic not in ("ldrsb", "ldrsh") \
        else None
    if mnemonic in ("ldrsb", "ldursb"):
        size = 1
    elif mnemonic in ("ldrsh", "ldursh"):
        size = 2
    elif mnemonic in ("ldrsw", "ldursw"):
        size = 4
    if size is None:
        first = regs[0]
        size = first[2] if first is not None else 8
    return regs, ops[count] if len(ops) > count else "", ops[count + 1:], size


def _store(insn, mnemonic, ops):
    regs, memory, rest, size = _transfer(mnemonic, ops)
    address, writeback = _address(memory, rest)
    if address[0] == "indexed":
        return
    for i, r in enumerate(regs):
        value = OTHER if r is None else (reg(r[0]) if r[1] and size == 8 else OTHER)
        if r is None and ops[i] in ("xzr", "wzr"):
            value = OTHER
        insn.effects.append(("store", add(address, i * size), size, value))
    if writeback is not None:
        insn.effects.append(("set", writeback[0], writeback[1]))


def _load(insn, mnemonic, ops):
    regs, memory, rest, size = _transfer(mnemonic, ops)
    address, writeback = _address(memory, rest)
    for i, r in enumerate(regs):
        if address[0] == "indexed":
            value = OTHER
        else:
            value = ("load", add(address, i * size), size) if r is not None and r[1] and size == 8 else OTHER
        insn.effects.append(("set", -1 - i, value))
    if writeback is not None:
        insn.effects.append(("set", writeback[0], writeback[1]))
    for i, r in enumerate(regs):
        if r is not None:
            _set(insn, r, reg(-1 - i))


def _generic(insn, mnemonic, ops):
    if not ops or mnemonic in _NO_WRITE:
        return
    if mnemonic.startswith(_ATOMICS):
        for text in ops:
            found = _reg(text)
            if found is not None:
                _set(insn, found, OTHER)
        return
    if mnemonic.startswith("st"):
        if mnemonic.startswith(("stx", "stlx")):
            found = _reg(ops[0])
            if found is not None:
                _set(insn, found, OTHER)
        for text in ops:
            if text.startswith("[") and text.strip("[]!").split(",")[0].strip() == "sp":
                insn.effects.append(("store", ("unknown", "vector store to the stack"), 8, OTHER))
        return
    first = ops[0]
    if first.startswith("{"):
        for name in first.strip("{}").split(","):
            found = _reg(name.strip().split(".")[0])
            if found is not None:
                _set(insn, found, OTHER)
        return
    found = _reg(first)
    if found is not None:
        _set(insn, found, OTHER)
