"""Apple compact unwind opcodes: the 32-bit encoding of one function's rule.

x86/x86_64 RBP_FRAME, STACK_IMMD, STACK_IND (its stack size read from the
function's code) and DWARF; arm64 FRAME, FRAMELESS and DWARF. `decode_encoding`
names an encoding's fields; `to_row` turns it into the shared Row model.
plugin/formats/compact_unwind.py reads the section that holds the encodings.
"""
from __future__ import annotations

from dataclasses import dataclass

from plugin.errors import DecodeError, DecodeKind, MemoryReadError
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind

SECTION = "__unwind_info"

# Bits shared by every architecture.
UNWIND_IS_NOT_FUNCTION_START = 0x80000000
UNWIND_HAS_LSDA = 0x40000000
UNWIND_PERSONALITY_MASK = 0x30000000
UNWIND_MODE_MASK = 0x0F000000

# x86_64 and i386 (same layout; i386 has 4-byte slots and other registers).
X86_MODE_NAMES = {0: "NONE", 1: "RBP_FRAME", 2: "STACK_IMMD", 3: "STACK_IND", 4: "DWARF"}
X86_FRAME_REGISTERS = 0x00007FFF
X86_FRAME_OFFSET = 0x00FF0000
X86_FRAMELESS_STACK_SIZE = 0x00FF0000
X86_FRAMELESS_STACK_ADJUST = 0x0000E000
X86_FRAMELESS_REG_COUNT = 0x00001C00
X86_FRAMELESS_REG_PERMUTATION = 0x000003FF
DWARF_SECTION_OFFSET = 0x00FFFFFF

# Compact register numbers 1..6 -> register names of plugin.arch.
X86_64_COMPACT_REGISTERS = {1: "rbx", 2: "r12", 3: "r13", 4: "r14", 5: "r15", 6: "rbp"}
I386_COMPACT_REGISTERS = {1: "ebx", 2: "ecx", 3: "edx", 4: "edi", 5: "esi", 6: "ebp"}

# arm64
ARM64_MODE_NAMES = {0: "NONE", 2: "FRAMELESS", 3: "DWARF", 4: "FRAME"}
ARM64_FRAMELESS_STACK_SIZE = 0x00FFF000
# (bit, first register, second register) in the order the pairs are stored.
ARM64_PAIRS = (
    (0x001, "x19", "x20"), (0x002, "x21", "x22"), (0x004, "x23", "x24"),
    (0x008, "x25", "x26"), (0x010, "x27", "x28"),
    (0x100, "d8", "d9"), (0x200, "d10", "d11"), (0x400, "d12", "d13"), (0x800, "d14", "d15"),
)
# plugin.arch.aarch64 names the FP/SIMD registers v0..v31 (DWARF 64..95);
# d8..d15 are the low halves of v8..v15.
ARM64_D_BASE = 64

# Mixed radices of the Lehmer code of the saved-register permutation, by count.
_PERMUTATION_RADICES = {
    1: (1,), 2: (5, 1), 3: (20, 4, 1), 4: (60, 12, 3, 1),
    5: (120, 24, 6, 2, 1), 6: (120, 24, 6, 2, 1),
}



@dataclass(frozen=True)
class Decoded:
    """One compact encoding, decoded for one architecture.

    registers   DWARF numbers of the saved registers in the order the encoding
                lists them: x86 frame slots from the lowest address up, x86
                frameless permutation order (registers[0] lowest), arm64 pairs
                from x19/x20 (highest address) down.
    saved       ((DWARF number, offset from the CFA), ...) in that order.
    stack_size  bytes from the stack pointer to the CFA (STACK_IMMD, FRAMELESS).
    sub_offset  STACK_IND: byte offset from the function start of the 32-bit
                immediate of the prologue's `sub $imm32, %rsp`;
    stack_adjust  STACK_IND: bytes added to that immediate.
    frame_offset  RBP_FRAME: bytes below the frame pointer where the saved
                registers start.
    dwarf_offset  DWARF: offset of the FDE in __eh_frame.
    """
    encoding: int
    arch: str
    mode: str
    registers: tuple = ()
    saved: tuple = ()
    stack_size: int = None
    sub_offset: int = None
    stack_adjust: int = None
    frame_offset: int = None
    dwarf_offset: int = None
    has_lsda: bool = False
    personality_index: int = 0
    function_start: bool = True
    text: str = ""


def decode_encoding(encoding, arch):
    """Decoded for a 32-bit compact encoding on `arch` (a plugin.arch Arch).

    Raises DecodeError only for an x86 frameless register permutation that
    names no register (a corrupt encoding).
    """
    encoding &= 0xFFFFFFFF
    common = dict(
        encoding=encoding,
        arch=arch.name if arch is not None else "?",
        has_lsda=bool(encoding & UNWIND_HAS_LSDA),
        personality_index=(encoding & UNWIND_PERSONALITY_MASK) >> 28,
        function_start=not encoding & UNWIND_IS_NOT_FUNCTION_START,
    )
    mode_bits = (encoding & UNWIND_MODE_MASK) >> 24
    name = arch.name if arch is not None else None
    if name in ("x86_64", "i386"):
        fields = _decode_x86(encoding, mode_bits, arch)
    elif name == "aarch64":
        fields = _decode_arm64(encoding, mode_bits, arch)
    else:
        fields = dict(mode="UNKNOWN")
    fields.update(common)
    fields["text"] = _describe(fields, arch)
    return Decoded(**fields)


def _decode_x86(encoding, mode_bits, arch):
    mode = X86_MODE_NAMES.get(mode_bits, "UNKNOWN")
    word = arch.address_size
    names = X86_64_COMPACT_REGISTERS if arch.name == "x86_64" else I386_COMPACT_REGISTERS
    if mode == "RBP_FRAME":
        offset = (encoding & X86_FRAME_OFFSET) >> 16
        fields = encoding & X86_FRAME_REGISTERS
        registers, saved = [], []
        for slot in range(5):
            compact = (fields >> (3 * slot)) & 7
            # 0 is "no register"; 7 has no meaning either (section 5).
            if compact in names:
                number = arch.number_of(names[compact])
                registers.append(number)
                # Slot i is at frame pointer - offset*word + i*word, and the
                # CFA is frame pointer + 2 words.
                saved.append((number, -word * (offset + 2 - slot)))
        return dict(mode=mode, registers=tuple(registers), saved=tuple(saved),
                    frame_offset=offset * word)
    if mode in ("STACK_IMMD", "STACK_IND"):
        size_field = (encoding & X86_FRAMELESS_STACK_SIZE) >> 16
        adjust = (encoding & X86_FRAMELESS_STACK_ADJUST) >> 13
        count = min((encoding & X86_FRAMELESS_REG_COUNT) >> 10, 6)   # 7 -> 6 (section 5)
        permutation = encoding & X86_FRAMELESS_REG_PERMUTATION
        compact = _unpermute(permutation, count, encoding)
        registers = tuple(arch.number_of(names[c]) for c in compact)
        # registers[0] is lowest; registers[count-1] sits just below the
        # return address (CFA - word), so at CFA - 2 words.
        saved = tuple((number, -word * (count - i + 1)) for i, number in enumerate(registers))
        out = dict(mode=mode, registers=registers, saved=saved)
        if mode == "STACK_IMMD":
            out["stack_size"] = size_field * word
        else:
            out["sub_offset"] = size_field
            out["stack_adjust"] = adjust * word
        return out
    if mode == "DWARF":
        return dict(mode=mode, dwarf_offset=encoding & DWARF_SECTION_OFFSET)
    return dict(mode=mode)


def _unpermute(permutation, count, encoding):
    """Compact register numbers (1..6) from the Lehmer-coded permutation.

    Digit i picks the digit-th smallest register number not used yet, the
    same algorithm as libunwind's and lldb's.
    """
    digits = []
    for radix in _PERMUTATION_RADICES.get(count, ()):
        digits.append(permutation // radix)
        permutation %= radix
    if count == 6:
        digits.append(0)
    unused = [1, 2, 3, 4, 5, 6]
    registers = []
    for digit in digits:
        if digit >= len(unused):
            raise DecodeError("compact encoding", None,
                              "encoding 0x%08x: register permutation names no register" % encoding,
                              DecodeKind.MALFORMED)
        registers.append(unused.pop(digit))
    return registers


def _decode_arm64(encoding, mode_bits, arch):
    mode = ARM64_MODE_NAMES.get(mode_bits, "UNKNOWN")
    if mode in ("FRAME", "FRAMELESS"):
        registers = []
        for bit, first, second in ARM64_PAIRS:
            if encoding & bit:
                registers.extend((_arm64_number(arch, first), _arm64_number(arch, second)))
        # FRAME: x29/x30 sit at CFA-16/CFA-8 and the pairs follow below them.
        # FRAMELESS: the pairs start right below the CFA; the prologue
        # `stp x20, x19, [sp, #-16]!` puts x19 at CFA-8 and x20 at CFA-16.
        # (libunwind reads the first frameless one at CFA itself; the
        # disassembly of the corpus' frameless functions says CFA-8.)
        top = -24 if mode == "FRAME" else -8
        saved = tuple((number, top - 8 * i) for i, number in enumerate(registers))
        out = dict(mode=mode, registers=tuple(registers), saved=saved)
        if mode == "FRAMELESS":
            out["stack_size"] = 16 * ((encoding & ARM64_FRAMELESS_STACK_SIZE) >> 12)
        return out
    if mode == "DWARF":
        return dict(mode=mode, dwarf_offset=encoding & DWARF_SECTION_OFFSET)
    return dict(mode=mode)


def _arm64_number(arch, name):
    if name.startswith("d"):
        return ARM64_D_BASE + int(name[1:])
    return arch.number_of(name)


def register_name(arch, number):
    if arch.name == "aarch64" and ARM64_D_BASE <= number < ARM64_D_BASE + 32:
        return "d%d" % (number - ARM64_D_BASE)
    return arch.name_of(number)


def _describe(fields, arch):
    """Readable one-line form, e.g. 'rbp frame: CFA=rbp+16, rbx=[CFA-24]'."""
    mode = fields["mode"]
    saved = " ".join("%s=[CFA%+d]" % (register_name(arch, n), off) for n, off in fields.get("saved", ()))
    if mode == "RBP_FRAME":
        fp, word = arch.name_of(arch.fp), arch.address_size
        text = "%s frame: CFA=%s+%d" % (fp, fp, 2 * word)
    elif mode == "STACK_IMMD":
        text = "frameless: CFA=%s+%d" % (arch.name_of(arch.sp), fields["stack_size"])
    elif mode == "STACK_IND":
        text = "frameless: CFA=%s+(imm32 at function+0x%x)+%d" % (
            arch.name_of(arch.sp), fields["sub_offset"], fields["stack_adjust"])
    elif mode == "FRAME":
        text = "frame: CFA=x29+16"
    elif mode == "FRAMELESS":
        text = "frameless: CFA=sp+%d, return address in x30" % fields["stack_size"]
    elif mode == "DWARF":
        text = "dwarf: FDE at __eh_frame+0x%x" % fields["dwarf_offset"]
    elif mode == "NONE":
        text = "no unwind information"
    else:
        text = "unknown mode %d" % ((fields["encoding"] & UNWIND_MODE_MASK) >> 24)
    if saved:
        text += ", saved " + saved
    if fields["has_lsda"]:
        text += ", LSDA"
    if fields["personality_index"]:
        text += ", personality %d" % fields["personality_index"]
    if not fields["function_start"]:
        text += ", not a function start"
    return text


def stack_ind_size(decoded, function_start, arch, read_code):
    """Stack size of a STACK_IND function: the imm32 of its prologue's
    `sub $imm32, %rsp` (read from its code) + stack_adjust.

    Checks that the two bytes before the immediate are the `sub r/m, imm32`
    opcode with %rsp/%esp as operand (81 EC), so a wrong offset is reported
    instead of producing a bogus CFA.
    """
    if read_code is None:
        raise DecodeError("compact encoding", None,
                          "STACK_IND needs the function's code to find its stack size", DecodeKind.ABSENT)
    where = function_start + decoded.sub_offset
    try:
        code = bytes(read_code(where - 2, 6))
    except MemoryReadError as exc:
        raise DecodeError("compact encoding", None, "STACK_IND: %s" % exc, DecodeKind.UNREADABLE) from None
    if len(code) != 6:
        raise DecodeError("compact encoding", None, "STACK_IND: short code read at 0x%x" % where,
                          DecodeKind.UNREADABLE)
    if code[:2] != b"\x81\xec":
        raise DecodeError("compact encoding", None,
                          "STACK_IND: no `sub $imm32, %%%s` before 0x%x (bytes %s)"
                          % (arch.name_of(arch.sp), where, code[:2].hex()), DecodeKind.MALFORMED)
    return int.from_bytes(code[2:], "little") + decoded.stack_adjust


def to_row(decoded, function_start, arch, read_code=None, function_end=None):
    """The plugin.model.rules.Row the encoding means in the function's body.

    Returns None when the encoding gives no rule here: DWARF (the caller goes
    to __eh_frame at decoded.dwarf_offset), NONE and UNKNOWN. STACK_IND reads
    the stack size from the code through read_code(address, size) -> bytes.
    """
    mode = decoded.mode
    word = arch.address_size
    registers = {}
    if mode == "RBP_FRAME":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.fp, offset=2 * word)
        registers.update(_saved_rules(decoded))
        # The frame's own slots win over a (meaningless) rbp slot number.
        registers[arch.fp] = Rule(RuleKind.OFFSET, -2 * word)
        registers[arch.ra] = Rule(RuleKind.OFFSET, -word)
    elif mode in ("STACK_IMMD", "STACK_IND"):
        size = decoded.stack_size if mode == "STACK_IMMD" else \
            stack_ind_size(decoded, function_start, arch, read_code)
        cfa = CfaRule(CfaKind.REGISTER, register=arch.sp, offset=size)
        registers.update(_saved_rules(decoded))
        registers[arch.ra] = Rule(RuleKind.OFFSET, -word)
    elif mode == "FRAME":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.fp, offset=16)
        registers.update(_saved_rules(decoded))
        registers[arch.fp] = Rule(RuleKind.OFFSET, -16)
        registers[arch.ra] = Rule(RuleKind.OFFSET, -8)
    elif mode == "FRAMELESS":
        cfa = CfaRule(CfaKind.REGISTER, register=arch.sp, offset=decoded.stack_size)
        registers.update(_saved_rules(decoded))
        registers[arch.ra] = Rule(RuleKind.SAME)      # the return address is still in x30
    else:
        return None
    return Row(address=function_start, cfa=cfa, registers=registers, end=function_end)


def _saved_rules(decoded):
    return {number: Rule(RuleKind.OFFSET, offset) for number, offset in decoded.saved}
