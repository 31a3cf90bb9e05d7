"""x86_64 instruction patterns, declared once: capstone's Intel-syntax text to effects.

Everything that moves the stack pointer or saves, restores or clobbers a
register is spelled out here: push/pop, sub/add/lea/and of rsp, mov to and
from stack slots, leave, xchg, the implicit writes of cpuid, syscall,
string instructions and the multiply/divide family, and the jump-table
idiom `lea base,[rip+T]; movsxd r,[base+i*4]; add r,base; jmp r`.
"""
from __future__ import annotations

from plugin.analysis.ops import OTHER, Flow, Insn, add, reg

CAPSTONE = ("CS_ARCH_X86", "CS_MODE_64")
SP, FP, RA = 7, 6, 16
ENTRY_SP = -8                       # at entry the stack pointer is CFA-8 ...
ENTRY_SLOTS = {-8: RA}              # ... and the return address is stored at CFA-8
RA_REGISTER = None                  # the return address lives on the stack, not in a register
CALLEE_SAVED = (3, 6, 12, 13, 14, 15)
CALL_CLOBBERED = (0, 1, 2, 4, 5, 8, 9, 10, 11)
POINTER_SIZE = 8
DIRECT_CALL_SIZES = (5,)                # the length of a direct call: `call rel32`
BOUND = 1000                        # pseudo-register: the immediate of the last `cmp reg, imm`
PADDING = ("nop", "int3", "xchg ax, ax")    # what compilers and linkers fill the gaps between functions with

_FULL = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"] + ["r%d" % n for n in range(8, 16)]
REGISTERS = {}                      # name -> (DWARF number, is the full 64-bit register)
for _n, _name in enumerate(_FULL):
    REGISTERS[_name] = (_n, True)
for _n, (_e, _w, _l, _h) in enumerate([("eax", "ax", "al", "ah"), ("edx", "dx", "dl", "dh"),
                                       ("ecx", "cx", "cl", "ch"), ("ebx", "bx", "bl", "bh"),
                                       ("esi", "si", "sil", None), ("edi", "di", "dil", None),
                                       ("ebp", "bp", "bpl", None), ("esp", "sp", "spl", None)]):
    for _name in (_e, _w, _l, _h):
        if _name:
            REGISTERS[_name] = (_n, False)
for _n in range(8, 16):
    for _suffix in ("d", "w", "b"):
        REGISTERS["r%d%s" % (_n, _suffix)] = (_n, False)

_SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "tbyte": 10, "xmmword": 16,
          "ymmword": 32, "zmmword": 64}
_PREFIXES = ("notrack ", "bnd ", "lock ", "rep ", "repe ", "repne ", "repz ", "repnz ", "data16 ")
_NO_WRITE = frozenset((
    "cmp", "test", "bt", "nop", "endbr64", "endbr32", "ucomiss", "ucomisd", "comiss", "comisd",
    "vucomiss", "vucomisd", "vcomiss", "vcomisd", "ptest", "vptest", "pause", "lfence", "mfence",
    "sfence", "prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta", "prefetchw", "clflush",
    "xtest", "ktestw", "kortestw", "kortestd", "kortestq", "kortestb", "vtestps", "vtestpd",
    "wait", "fwait", "clc", "stc", "cld", "std", "cmc", "sahf", "emms", "vzeroupper", "vzeroall",
    "int3", "fxsave", "fxsave64", "xsave", "xsave64", "xsavec", "xsavec64", "fnstenv", "fnstcw",
    "fstcw", "fnstsw", "stmxcsr", "vstmxcsr", "incsspq", "rdsspq", "ldmxcsr", "fldcw",
))
_STRING = ("stos", "movs", "lods", "scas", "cmps")
_IMPLICIT = {                       # mnemonic -> registers it writes besides its operands
    "cpuid": (0, 3, 2, 1), "syscall": (0, 2, 11), "rdtsc": (0, 1), "rdtscp": (0, 1, 2),
    "xgetbv": (0, 1), "cqo": (1,), "cdq": (1,), "cwd": (1,), "cdqe": (0,), "cwde": (0,),
    "cbw": (0,), "mul": (0, 1), "div": (0, 1), "idiv": (0, 1), "cmpxchg": (0,),
    "cmpxchg8b": (0, 1), "cmpxchg16b": (0, 1), "rdpkru": (0, 1, 2), "lahf": (0,),
    "loop": (2,), "loope": (2,), "loopne": (2,), "rdrand": (), "rdseed": (),
}
_STOPS = frozenset(("hlt", "ud2", "ud1", "ud0", "ud1l"))


def is_padding(text: str) -> bool:
    """Is the instruction (capstone's text) alignment padding between functions?"""
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text.startswith(PADDING)


def _number(text):
    try:
        return int(text, 0)
    except ValueError:
        return None


def _operand(text, end):
    """("reg", n, full) | ("imm", v) | ("mem", addr_expr, size, index) | ("other",)."""
    text = text.strip()
    if "[" in text:
        head, _, inner = text.partition("[")
        size = next((_SIZES[w] for w in head.split() if w in _SIZES), None)
        if ":" in head:                 # fs:/gs: thread-local memory, never this frame
            return ("mem", ("other",), size, False)
        inner = inner.rstrip("]")
        base, index, disp, scale = None, None, 0, 1
        for sign, term in _terms(inner):
            if "*" in term:
                index, _, factor = term.partition("*")
                scale = _number(factor) or 0
                continue
            if term in REGISTERS or term == "rip":
                if base is None:
                    base = term
                else:
                    index = term
                continue
            value = _number(term)
            if value is None:
                return ("mem", ("unknown", "operand %s" % text), size, True)
            disp += sign * value
        if base == "rip":
            return ("mem", ("addr", end + disp), size, index is not None)
        if base is None:
            return ("mem", ("other",) if index is None else ("unknown", "absolute indexed"), size,
                    index is not None)
        number, full = REGISTERS[base]
        expr = add(reg(number), disp) if full else ("unknown", "32-bit address")
        if index is not None:
            return ("mem", ("indexed", number, index, scale, disp), size, True)
        return ("mem", expr, size, False)
    if text in REGISTERS:
        number, full = REGISTERS[text]
        return ("reg", number, full)
    value = _number(text)
    if value is not None:
        return ("imm", value)
    return ("other",)


def _terms(inner):
    sign = 1
    for token in inner.split():
        if token == "+":
            sign = 1
        elif token == "-":
            sign = -1
        else:
            yield sign, token
            sign = 1


def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def _value(op, state_size=8):
    """Expression for reading operand op."""
    if op[0] == "reg":
        return reg(op[1]) if op[2] else OTHER
    if op[0] == "mem":
        if op[3] or op[1][0] in ("indexed",):
            return ("unknown", "indexed load")
        return ("load", op[1], op[2] or state_size)
    return OTHER


def _write(insn, op, expr):
    """Effects of writing expr to operand op."""
    if op[0] == "reg":
        insn.effects.append(("set", op[1], expr if op[2] else OTHER))
    elif op[0] == "mem":
        if op[3] or op[1][0] == "indexed":
            return                      # an indexed store: a local array, not a saved slot
        insn.effects.append(("store", op[1], op[2] or 8, expr))


def decode(address, size, mnemonic, op_str):
    """One capstone (address, size, mnemonic, op_str) as an Insn."""
    end = address + size
    insn = Insn(address, size, ("%s %s" % (mnemonic, op_str)).strip())
    for prefix in _PREFIXES:
        if mnemonic.startswith(prefix):
            mnemonic = mnemonic[len(prefix):]
    ops = [_operand(part, end) for part in op_str.split(",")] if op_str else []
    first = ops[0] if ops else None
    second = ops[1] if len(ops) > 1 else None
    if mnemonic == "push":
        insn.effects.append(("store", add(reg(SP), -8), 8, _value(first)))
        insn.effects.append(("set", SP, add(reg(SP), -8)))
    elif mnemonic == "pop":
        insn.effects.append(("set", -1, ("load", reg(SP), 8)))
        insn.effects.append(("set", SP, add(reg(SP), 8)))
        _write(insn, first, reg(-1))
    elif mnemonic == "leave":
        insn.effects += [("set", SP, reg(FP)), ("set", FP, ("load", reg(SP), 8)),
                         ("set", SP, add(reg(SP), 8))]
    elif mnemonic in ("mov", "movabs") and first is not None and second is not None:
        if second[0] == "mem" and second[1][0] == "indexed" and second[2] == 4 and first[0] == "reg":
            insn.effects.append(("set", first[1], ("table", second[1][1], 4)))
        else:
            _write(insn, first, _value(second) if first[0] != "reg" or first[2] else OTHER)
    elif mnemonic == "movsxd" and second is not None and second[0] == "mem" \
            and second[1][0] == "indexed" and first[0] == "reg":
        insn.effects.append(("set", first[1], ("table", second[1][1], 4)))
    elif mnemonic == "lea" and first is not None and first[0] == "reg":
        target = second[1] if second[0] == "mem" else ("other",)
        if target[0] == "indexed" and target[3] == 1 and target[4] == 0 and target[2] in REGISTERS \
                and first[2]:
            target = ("target", target[1], REGISTERS[target[2]][0])     # table base + entry
        elif target[0] == "indexed" or not first[2]:
            target = OTHER if first[1] != SP else ("unknown", "%s" % insn.text)
        insn.effects.append(("set", first[1], target))
    elif mnemonic in ("add", "sub") and first is not None and first[0] == "reg" and first[2]:
        if second[0] == "imm":
            k = _signed(second[1])
            insn.effects.append(("set", first[1], add(reg(first[1]), k if mnemonic == "add" else -k)))
        elif mnemonic == "add" and second[0] == "reg" and second[2] and first[1] != SP:
            insn.effects.append(("set", first[1], ("target", first[1], second[1])))
        else:
            insn.effects.append(("set", first[1], ("unknown", "%s: stack adjusted by an unknown amount"
                                                   % insn.text) if first[1] == SP else OTHER))
    elif mnemonic == "and" and first is not None and first[0] == "reg" and first[1] == SP \
            and second is not None and second[0] == "imm":
        mask = _signed(second[1])
        if mask < 0 and (-mask) & (-mask - 1) == 0:
            insn.effects.append(("set", SP, ("align", reg(SP), address)))
        else:
            insn.effects.append(("set", SP, ("unknown", "%s: unknown realignment" % insn.text)))
    elif mnemonic == "xchg" and first is not None and second is not None:
        if first[0] == "reg" and second[0] == "reg" and first[2] and second[2]:
            insn.effects += [("set", -1, reg(first[1])), ("set", first[1], reg(second[1])),
                             ("set", second[1], reg(-1))]
        else:
            for op in ops:
                _write(insn, op, ("unknown", "exchanged with memory"))
    elif mnemonic == "xadd" and len(ops) == 2:
        for op in ops:
            _write(insn, op, OTHER)
    elif mnemonic == "ret" or mnemonic == "retf":
        insn.flow = Flow.RET
    elif mnemonic == "call":
        insn.flow = Flow.CALL
        insn.target = first[1] if first is not None and first[0] == "imm" else None
        if first is not None and first[0] == "mem" and first[1][0] == "addr":
            insn.indirect, insn.through_memory = ("mem", first[1]), True     # call *GOT(%rip)
    elif mnemonic == "jmp":
        _jump(insn, first)
    elif mnemonic.startswith("j") or mnemonic.startswith("loop"):
        insn.flow = Flow.BRANCH
        insn.target = first[1] if first is not None and first[0] == "imm" else None
        if insn.target is None:
            insn.flow = Flow.NEXT
        for number in _IMPLICIT.get(mnemonic, ()):
            insn.effects.append(("set", number, OTHER))
    elif mnemonic in _STOPS:
        insn.flow = Flow.STOP
    elif mnemonic == "cmp" and second is not None and second[0] == "imm" and first[0] == "reg":
        insn.effects.append(("set", BOUND, ("addr", second[1])))   # a jump table's last index, maybe
    else:
        _generic(insn, mnemonic, ops)
    return insn


def _jump(insn, target):
    if target is not None and target[0] == "imm":
        insn.flow, insn.target = Flow.JUMP, target[1]
        return
    insn.flow = Flow.INDIRECT
    if target is not None and target[0] == "reg":
        insn.indirect = reg(target[1])
    elif target is not None and target[0] == "mem":
        insn.through_memory = True
        insn.indirect = ("mem", target[1])
    else:
        insn.indirect = ("unknown", insn.text)


def _generic(insn, mnemonic, ops):
    """Instructions that only matter by what they overwrite."""
    if mnemonic[:4] in _STRING and len(mnemonic) == 5 and ("di]" in insn.text or "si]" in insn.text):
        for number in (0, 2, 4, 5):         # string instructions: rax, rcx, rsi, rdi
            insn.effects.append(("set", number, OTHER))
        return
    for number in _IMPLICIT.get(mnemonic, ()):
        insn.effects.append(("set", number, OTHER))
    if not ops or mnemonic in _NO_WRITE or mnemonic.startswith("prefetch") \
            or (mnemonic.startswith("cmp") and not mnemonic.startswith("cmpxchg")):
        return
    if mnemonic in ("mul", "div", "idiv") or (mnemonic == "imul" and len(ops) == 1):
        return
    first = ops[0]
    if first[0] == "reg":
        if first[1] == SP:
            insn.effects.append(("set", SP, ("unknown", "%s writes the stack pointer" % insn.text)))
        else:
            insn.effects.append(("set", first[1], OTHER))
    elif first[0] == "mem":
        _write(insn, first, ("unknown", "written by %s" % insn.text))
    if mnemonic in ("xadd", "cmpxchg") and len(ops) > 1 and ops[1][0] == "reg":
        insn.effects.append(("set", ops[1][1], OTHER))
