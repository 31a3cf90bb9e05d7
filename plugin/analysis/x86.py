"""x86 instruction patterns, declared once for x86_64 and i386: capstone's Intel-syntax text to effects.

Everything that moves the stack pointer or saves, restores or clobbers a
register is spelled out here: push/pop, sub/add/lea/and of the stack
pointer, mov to and from stack slots, leave, xchg, the implicit writes of
cpuid, syscall, int, string instructions and the multiply/divide family,
and the jump-table idioms (`lea base,[rip+T]; movsxd r,[base+i*4]; add
r,base; jmp r`, i386's `mov r,[ebx+i*4-T]; add r,ebx; jmp r` and `add ebx,
[ebx+i*4]; jmp ebx` (ebx from a pc thunk), the absolute `jmp [T+i*w]`; the
table loads and the bounds on their index: plugin.analysis.x86_tables). On i386 a call to the very next instruction
(`call 1f; 1: pop ebx`) pushes its address and goes on.

The two modes differ only in their registers (names, DWARF numbers, which
are full width) and word size: a Dialect, declared by plugin.analysis.x86_64
and plugin.analysis.i386.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

from plugin.analysis import x86_tables as tables
from plugin.analysis.bounds import BOUND, BOUND_OF, BOUND_PENDING, MAX_TABLE_ENTRIES
from plugin.analysis.ops import OTHER, Flow, Insn, add, after_syscall, reg

PADDING = ("nop", "int3", "xchg ax, ax")    # what compilers and linkers fill the gaps between functions with
_SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "tbyte": 10, "xmmword": 16,
          "ymmword": 32, "zmmword": 64}
PREFIXES = ("notrack ", "bnd ", "lock ", "rep ", "repe ", "repne ", "repz ", "repnz ", "data16 ")
_NO_WRITE = frozenset((
    "cmp", "test", "bt", "nop", "endbr64", "endbr32", "ucomiss", "ucomisd", "comiss", "comisd",
    "vucomiss", "vucomisd", "vcomiss", "vcomisd", "ptest", "vptest", "pause", "lfence", "mfence",
    "sfence", "prefetcht0", "prefetcht1", "prefetcht2", "prefetchnta", "prefetchw", "clflush",
    "xtest", "ktestw", "kortestw", "kortestd", "kortestq", "kortestb", "vtestps", "vtestpd",
    "wait", "fwait", "clc", "stc", "cld", "std", "cmc", "sahf", "emms", "vzeroupper", "vzeroall",
    "int3", "fxsave", "fxsave64", "xsave", "xsave64", "xsavec", "xsavec64", "fnstenv", "fnstcw",
    "fstcw", "fnstsw", "stmxcsr", "vstmxcsr", "incsspq", "rdsspq", "ldmxcsr", "fldcw",
    "incsspd", "rdsspd",
))
_STRING = ("stos", "movs", "lods", "scas", "cmps")
_STRING_WRITES = ("eax", "ecx", "esi", "edi")
_IMPLICIT = {                       # mnemonic -> registers it writes besides its operands
    "cpuid": ("eax", "ebx", "ecx", "edx"), "syscall": ("eax", "ecx", "r11"), "rdtsc": ("eax", "edx"),
    "rdtscp": ("eax", "edx", "ecx"), "xgetbv": ("eax", "edx"), "cqo": ("edx",), "cdq": ("edx",),
    "cwd": ("edx",), "cdqe": ("eax",), "cwde": ("eax",), "cbw": ("eax",), "mul": ("eax", "edx"),
    "div": ("eax", "edx"), "idiv": ("eax", "edx"), "cmpxchg": ("eax",), "cmpxchg8b": ("eax", "edx"),
    "cmpxchg16b": ("eax", "edx"), "rdpkru": ("eax", "edx", "ecx"), "lahf": ("eax",),
    "loop": ("ecx",), "loope": ("ecx",), "loopne": ("ecx",), "rdrand": (), "rdseed": (),
    "int": ("eax",), "sysenter": ("eax",),
}
STOPS = frozenset(("hlt", "ud2", "ud1", "ud0", "ud1l"))


@dataclass(frozen=True)
class Dialect:
    """One mode's registers: name -> (DWARF number, is the full register), the stack and frame
    pointers' numbers and the word size."""
    registers: Dict[str, Tuple[int, bool]]
    sp: int
    fp: int
    word: int
    pc_name: str = ""               # the register a pc-relative operand names ("rip"), if any
    call_next_pushes: bool = False  # `call` to the next instruction gets the pc (i386; in x86_64 .o files
                                    # an unrelocated call reads the same)

    def number(self, name):
        found = self.registers.get(name)
        return found[0] if found is not None else None

    def signed(self, value):
        bits = 8 * self.word
        return value - (1 << bits) if value >= 1 << (bits - 1) else value


def is_padding(text: str, padding=PADDING) -> bool:
    """Is the instruction (capstone's text) alignment padding between functions?"""
    if text.startswith(PREFIXES):
        for prefix in PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix):]
    return text.startswith(padding)


def _number(text):
    try:
        return int(text, 0)
    except ValueError:
        return None


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


def _operand(d: Dialect, text, end):
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
            if term in d.registers or (d.pc_name and term == d.pc_name):
                if base is None:
                    base = term
                else:
                    index = term
                continue
            value = _number(term)
            if value is None:
                return ("mem", ("unknown", "operand %s" % text), size, True)
            disp += sign * value
        if base is not None and base == d.pc_name:
            return ("mem", ("addr", end + disp), size, index is not None)
        if base is None:                # an absolute address, or a table indexed from one
            if index is None:
                return ("mem", ("addr", disp), size, False)
            return ("mem", ("indexed", None, index, scale, disp), size, True)
        number, full = d.registers[base]
        expr = add(reg(number), disp) if full else ("unknown", "%d-bit address" % (4 * d.word))
        if index is not None:
            return ("mem", ("indexed", number, index, scale, disp), size, True)
        return ("mem", expr, size, False)
    if text in d.registers:
        number, full = d.registers[text]
        return ("reg", number, full)
    value = _number(text)
    if value is not None:
        return ("imm", value)
    return ("other",)


def _value(d: Dialect, op):
    """Expression for reading operand op."""
    if op[0] == "reg":
        return reg(op[1]) if op[2] else OTHER
    if op[0] == "mem":
        if op[3] or op[1][0] in ("indexed",):
            return ("unknown", "indexed load")
        return ("load", op[1], op[2] or d.word)
    return OTHER


def _write(d: Dialect, insn, op, expr):
    """Effects of writing expr to operand op."""
    if op[0] == "reg":
        insn.effects.append(("set", op[1], expr if op[2] else OTHER))
    elif op[0] == "mem":
        if op[3] or op[1][0] == "indexed":
            return                      # an indexed store: a local array, not a saved slot
        insn.effects.append(("store", op[1], op[2] or d.word, expr))


def _implicit(d: Dialect, insn, names):
    for name in names:
        number = d.number(name)
        if number is not None:
            insn.effects.append(("set", number, OTHER))


def decode_text(d: Dialect, address: int, size: int, mnemonic: str, op_str: str) -> Insn:
    """The Insn of one instruction as capstone gave its text, in dialect d (x86_decoded caches it)."""
    end = address + size
    insn = Insn(address, size, ("%s %s" % (mnemonic, op_str)).strip())
    if mnemonic.startswith(PREFIXES):
        for prefix in PREFIXES:
            if mnemonic.startswith(prefix):
                mnemonic = mnemonic[len(prefix):]
    insn.flags_kept = mnemonic in _FLAGS_KEPT or mnemonic.startswith(("cmov", "set", "j"))
    ops = [_operand(d, part, end) for part in op_str.split(",")] if op_str else []
    first = ops[0] if ops else None
    second = ops[1] if len(ops) > 1 else None
    sp, word = d.sp, d.word
    if mnemonic == "push":
        insn.effects.append(("store", add(reg(sp), -word), word, _value(d, first)))
        insn.effects.append(("set", sp, add(reg(sp), -word)))
    elif mnemonic == "pop":
        insn.effects.append(("set", -1, ("load", reg(sp), word)))
        insn.effects.append(("set", sp, add(reg(sp), word)))
        _write(d, insn, first, reg(-1))
    elif mnemonic in _PUSH_FLAGS:
        insn.effects.append(("store", add(reg(sp), -word), word, OTHER))
        insn.effects.append(("set", sp, add(reg(sp), -word)))
    elif mnemonic in _POP_FLAGS:
        insn.effects.append(("set", sp, add(reg(sp), word)))
    elif mnemonic == "leave":
        insn.effects += [("set", sp, reg(d.fp)), ("set", d.fp, ("load", reg(sp), word)),
                         ("set", sp, add(reg(sp), word))]
    elif mnemonic in ("mov", "movabs") and first is not None and second is not None:
        if tables.relative_entry(d, second) and first[0] == "reg":
            insn.effects.append(("set", first[1], tables.relative_entry(d, second)))
        elif tables.absolute_table_load(d, insn, first, second):
            pass
        elif first[0] == "reg" and first[1] == ACCUMULATOR and second[0] == "imm" \
                and (first[2] or op_str.startswith("eax")):
            insn.effects.append(("set", ACCUMULATOR, ("addr", second[1])))    # a stack probe's size, maybe
        else:
            copied = tables.loaded_bound(insn, first, second)
            _write(d, insn, first, _value(d, second) if first[0] != "reg" or first[2] else OTHER)
            if copied:
                insn.effects.append(("set", BOUND_OF, reg(tables.BOUND_TEMPORARY)))
    elif mnemonic == "movsxd" and tables.relative_entry(d, second) and first[0] == "reg":
        insn.effects.append(("set", first[1], tables.relative_entry(d, second)))
    elif mnemonic == "movzx" and first is not None and first[0] == "reg" and second is not None \
            and tables.byte_source(d, second, op_str):
        tables.zero_extended_byte(d, insn, first, second)
    elif mnemonic == "lea" and first is not None and first[0] == "reg":
        target = second[1] if second[0] == "mem" else ("other",)
        if target[0] == "indexed" and target[3] == 1 and target[4] == 0 and target[2] in d.registers \
                and target[1] is not None and first[2]:
            target = ("target", target[1], d.registers[target[2]][0])     # table base + entry
        elif target[0] == "indexed" or not first[2]:
            target = OTHER if first[1] != sp else ("unknown", "%s" % insn.text)
        insn.effects.append(("set", first[1], target))
    elif mnemonic in ("add", "sub") and first is not None and first[0] == "reg" and first[2]:
        if second[0] == "imm":
            k = d.signed(second[1])
            insn.effects.append(("set", first[1], add(reg(first[1]), k if mnemonic == "add" else -k)))
        elif mnemonic == "add" and second[0] == "reg" and second[2] and first[1] != sp:
            insn.effects.append(("set", first[1], ("target", first[1], second[1])))
        elif mnemonic == "add" and tables.relative_entry(d, second) and first[1] != sp:
            # i386 PIC `add ebx, [ebx + i*4 + D]`: entry i of a table at ebx + D, relative to ebx, plus ebx
            insn.effects.append(("set", tables.ENTRY_TEMPORARY, tables.relative_entry(d, second)))
            insn.effects.append(("set", first[1], ("target", first[1], tables.ENTRY_TEMPORARY)))
        elif mnemonic == "sub" and first[1] == sp and second[0] == "reg" and second[2]:
            # rsp -= rax after a stack probe (__chkstk): exact when the register holds a known constant
            insn.effects.append(("set", sp, ("sub", reg(sp), second[1],
                                             "%s: stack adjusted by an unknown amount" % insn.text)))
        else:
            insn.effects.append(("set", first[1], ("unknown", "%s: stack adjusted by an unknown amount"
                                                   % insn.text) if first[1] == sp else OTHER))
    elif mnemonic == "and" and first is not None and first[0] == "reg" and first[1] == sp \
            and second is not None and second[0] == "imm":
        mask = d.signed(second[1])
        if mask < 0 and (-mask) & (-mask - 1) == 0:
            insn.effects.append(("set", sp, ("align", reg(sp), address)))
        else:
            insn.effects.append(("set", sp, ("unknown", "%s: unknown realignment" % insn.text)))
    elif mnemonic == "and" and first is not None and first[0] == "reg" and first[2] and second is not None \
            and second[0] == "imm" and 0 <= second[1] < MAX_TABLE_ENTRIES:
        tables.masked(insn, first[1], second[1])      # `and edi, 0xf`: edi <= 15, a table index maybe
    elif mnemonic == "xchg" and first is not None and second is not None:
        if first[0] == "reg" and second[0] == "reg" and first[2] and second[2]:
            insn.effects += [("set", -1, reg(first[1])), ("set", first[1], reg(second[1])),
                             ("set", second[1], reg(-1))]
        else:
            for op in ops:
                _write(d, insn, op, ("unknown", "exchanged with memory"))
    elif mnemonic == "xadd" and len(ops) == 2:
        for op in ops:
            _write(d, insn, op, OTHER)
    elif mnemonic == "ret" or mnemonic == "retf":
        insn.flow = Flow.RET
        insn.popped = first[1] if first is not None and first[0] == "imm" else 0     # ret imm16
    elif mnemonic == "call" and d.call_next_pushes and first is not None and first[0] == "imm" \
            and first[1] == end:
        # call to the next instruction: pushes its own end, which the code then pops (i386 PIC)
        insn.effects.append(("store", add(reg(sp), -word), word, ("addr", end)))
        insn.effects.append(("set", sp, add(reg(sp), -word)))
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
        insn.bound_kept = tables.UNSIGNED_BOUND.get(mnemonic)
        _implicit(d, insn, _IMPLICIT.get(mnemonic, ()))
    elif mnemonic in STOPS:
        insn.flow = Flow.STOP
    elif mnemonic in VECTOR_MOVES and _vector_move(d, insn, ops):
        pass
    elif mnemonic == "cmp" and second is not None and second[0] == "imm" and first[0] in ("reg", "mem"):
        insn.effects.append(("set", BOUND, ("addr", second[1])))   # a jump table's last index, maybe
        insn.effects.append(("set", BOUND_OF, ("addr", first[1] if first[0] == "reg" else ("mem", first[1]))))
        insn.effects.append(("set", BOUND_PENDING, ("addr", address)))   # a bound once an unsigned branch agrees
    else:
        _generic(d, insn, mnemonic, ops)
    return insn


# Whole 16-byte moves of an xmm register: how Windows x64 code saves and restores xmm6-15.
VECTOR_MOVES = frozenset(("movaps", "movups", "movapd", "movupd", "movdqa", "movdqu", "vmovaps", "vmovups",
                          "vmovapd", "vmovupd", "vmovdqa", "vmovdqu", "vmovdqa32", "vmovdqa64", "vmovdqu8",
                          "vmovdqu16", "vmovdqu32", "vmovdqu64"))


def _is_xmm(d: Dialect, op) -> bool:
    return op is not None and op[0] == "reg" and op[2] and d.number("xmm0") is not None \
        and 0 <= op[1] - d.number("xmm0") < 16


def _vector_move(d: Dialect, insn, ops) -> bool:
    """A 16-byte move between an xmm register and a stack slot or another xmm register: the
    register's value follows it. The slot is keyed at its first byte, like a word: the 16 bytes
    are first marked written (nothing else tracked stays there), then the register's value is
    recorded at the slot (a later store of 8 bytes or fewer into the upper half alone is not seen
    to overwrite it: a limit of the word-keyed slots). False: not such a move (the generic rules apply)."""
    if len(ops) != 2:
        return False
    first, second = ops
    if _is_xmm(d, first) and _is_xmm(d, second):
        insn.effects.append(("set", first[1], reg(second[1])))
        return True
    if _is_xmm(d, second) and first[0] == "mem" and first[2] == 16 and not first[3] \
            and first[1][0] != "indexed":
        insn.effects.append(("store", first[1], 16, ("unknown", "written by %s" % insn.text)))
        insn.effects.append(("store", first[1], d.word, reg(second[1])))
        return True
    if _is_xmm(d, first) and second[0] == "mem" and second[2] == 16 and not second[3] \
            and second[1][0] != "indexed":
        insn.effects.append(("set", first[1], ("load", second[1], d.word)))
        return True
    return False


ACCUMULATOR = 0                     # rax/eax (DWARF 0 in both modes): a constant moved there is kept
_PUSH_FLAGS = frozenset(("pushf", "pushfd", "pushfq"))       # the flags register pushed and popped: a word
_POP_FLAGS = frozenset(("popf", "popfd", "popfq"))
_FLAGS_KEPT = frozenset(("mov", "movabs", "movzx", "movsx", "movsxd", "lea", "push", "pop", "nop",
                         "endbr64", "endbr32", "xchg", "bswap", "not", "cmp", "leave"))   # cmp: its own
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


def _generic(d: Dialect, insn, mnemonic, ops):
    """Instructions that only matter by what they overwrite."""
    if mnemonic[:4] in _STRING and len(mnemonic) == 5 and ("di]" in insn.text or "si]" in insn.text):
        _implicit(d, insn, _STRING_WRITES)
        return
    if mnemonic == "syscall" or (mnemonic == "int" and insn.text.endswith("0x80")):
        insn.effects.append(after_syscall("x86_64" if d.word == 8 else "i386", d.sp, d.number("eax")))
    _implicit(d, insn, _IMPLICIT.get(mnemonic, ()))
    if not ops or mnemonic in _NO_WRITE or mnemonic.startswith("prefetch") \
            or (mnemonic.startswith("cmp") and not mnemonic.startswith("cmpxchg")):
        return
    if mnemonic in ("mul", "div", "idiv") or (mnemonic == "imul" and len(ops) == 1):
        return
    first = ops[0]
    if first[0] == "reg":
        if first[1] == d.sp:
            insn.effects.append(("set", d.sp, ("unknown", "%s writes the stack pointer" % insn.text)))
        else:
            insn.effects.append(("set", first[1], OTHER))
    elif first[0] == "mem":
        _write(d, insn, first, ("unknown", "written by %s" % insn.text))
    if mnemonic in ("xadd", "cmpxchg", "mulx") and len(ops) > 1 and ops[1][0] == "reg":   # mulx: hi, lo
        insn.effects.append(("set", ops[1][1], OTHER))
