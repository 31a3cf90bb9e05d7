"""SFrame's constants and decoded records (header fields, FDEs, FREs, rules),
and the translation of SFrame rules into the shared Row model. The section
itself is read by plugin/formats/sframe.py."""
from __future__ import annotations

from dataclasses import dataclass, field

from plugin.leb128 import encode_sleb, encode_uleb
from plugin.model.rules import Rule, RuleKind

MAGIC = 0xDEE2
HEADER_SIZE = 28
# Every SFrame ABI is 64-bit; addresses wrap like readelf's %PRIx64.
ADDRESS_MASK = (1 << 64) - 1

VERSION_1, VERSION_2, VERSION_3 = 1, 2, 3

F_FDE_SORTED = 0x1
F_FRAME_POINTER = 0x2            # v1 and v2 only
F_FDE_FUNC_START_PCREL = 0x4     # v2 (erratum 1) and v3

ABI_AARCH64_ENDIAN_BIG = 1
ABI_AARCH64_ENDIAN_LITTLE = 2
ABI_AMD64_ENDIAN_LITTLE = 3
ABI_S390X_ENDIAN_BIG = 4

ABI_NAMES = {
    ABI_AARCH64_ENDIAN_BIG: "AARCH64_ENDIAN_BIG",
    ABI_AARCH64_ENDIAN_LITTLE: "AARCH64_ENDIAN_LITTLE",
    ABI_AMD64_ENDIAN_LITTLE: "AMD64_ENDIAN_LITTLE",
    ABI_S390X_ENDIAN_BIG: "S390X_ENDIAN_BIG",
}
ABI_ARCH_NAMES = {
    ABI_AARCH64_ENDIAN_BIG: "aarch64",
    ABI_AARCH64_ENDIAN_LITTLE: "aarch64",
    ABI_AMD64_ENDIAN_LITTLE: "x86_64",
    ABI_S390X_ENDIAN_BIG: "s390x",
}

FDE_SIZES = {VERSION_1: 17, VERSION_2: 20, VERSION_3: 16}
V3_ATTR_SIZE = 5

# FDE info byte: bits 0-3 FRE type (start-address size), bit 4 PC type,
# bit 5 AArch64 pauth key, bit 7 signal frame (v3 only).
FRE_TYPE_SIZES = {0: 1, 1: 2, 2: 4}
PC_TYPE_INC, PC_TYPE_MASK = 0, 1
FDE_TYPE_DEFAULT, FDE_TYPE_FLEX = 0, 1     # v3 info2 bits 0-4

# FRE info byte: bit 0 CFA base (0 = FP, 1 = SP), bits 1-4 data-word count,
# bits 5-6 data-word size, bit 7 mangled (signed) return address.
DATA_WORD_SIZES = {0: 1, 1: 2, 2: 4}

# s390x stores the CFA offset scaled down by 8 and shifted by -160 so that
# common frames fit one signed byte; SP is CFA - 160.
S390X_CFA_OFFSET_ADJUSTMENT = -160
S390X_CFA_OFFSET_ALIGNMENT_FACTOR = 8
S390X_SP_VAL_OFFSET = -160

# The RA data word 0 is padding: s390x "FP saved, RA not saved"; flex
# FDEs "RA has no explicit rule, the FP pair follows".
RA_PADDING = 0

# DWARF expression opcodes used to express flex rules that a Rule kind
# cannot say directly (register + offset, optionally dereferenced).
DW_OP_BREG0 = 0x70
DW_OP_BREGX = 0x92


@dataclass(frozen=True)
class SFrameRule:
    """One recovery rule of an FRE, in SFrame's own terms.

    value = (register `register` if base == "register" else the CFA) + offset,
    then read from memory when `deref` is set. A default-FDE "saved at
    CFA+off" is base="cfa", deref=True; an s390x v2 "saved in register N"
    is base="register", offset=0, deref=False.
    """
    base: str                  # "cfa" or "register"
    offset: int = 0
    register: int = None
    deref: bool = True
    control: int = None        # flex FDEs: the raw control word

    def text(self, arch=None):
        name = "c" if self.base == "cfa" else register_text(self.register, arch)
        core = "%s%+d" % (name, self.offset)
        return "(%s)" % core if self.deref else core


@dataclass
class SFrameFDE:
    index: int
    offset: int                # section offset of the FDE (v3: of its index entry)
    start: int                 # runtime address of the function
    size: int
    end: int
    fre_offset: int            # section offset of the first FRE
    num_fres: int
    fre_type: int              # size in bytes of each FRE start offset: 1, 2 or 4
    pc_type: str               # "inc" or "mask"
    rep_size: int              # MASK: repetition block size (v1 has none: 0)
    fde_type: str              # "default", "flex" or "type-N" (unknown v3 type)
    signal_frame: bool
    ra_mangled_key: str        # "A" / "B" on AArch64, None elsewhere
    info: int                  # raw info byte
    info2: int = None          # raw second info byte (v3)
    attr_offset: int = None    # v3: section offset of the FDE attribute
    start_field: int = 0       # the raw signed start value as stored
    outermost: bool = False    # v3: a default FDE with no FREs marks an outermost frame

    def contains(self, pc):
        return self.start <= pc < self.end


@dataclass
class SFrameFRE:
    index: int                 # position within its FDE
    offset: int                # section offset of the FRE
    start_offset: int          # from the function start (MASK: within the block)
    start_address: int         # fde.start + start_offset
    info: int                  # raw info byte
    cfa_base: str              # "sp", "fp", or "rN" (flex FDEs on another register)
    data_word_size: int        # 1, 2 or 4
    words: list                # the data words, signed
    ra_mangled: bool
    outermost: bool            # no data words: RA undefined
    cfa: SFrameRule = None     # base "register"; None when outermost
    ra: SFrameRule = None      # None: the default rule (header fixed offset or the link register)
    fp: SFrameRule = None      # None: FP not saved (unchanged)
    ra_padding: bool = False   # a padding word stands in the RA position ('U' in dumps)
    notes: list = field(default_factory=list)

    @property
    def cfa_offset(self):
        return None if self.cfa is None else self.cfa.offset

    @property
    def cfa_register(self):
        return None if self.cfa is None else self.cfa.register

    @property
    def cfa_deref(self):
        return bool(self.cfa is not None and self.cfa.deref)

    @property
    def fp_offset(self):
        """CFA offset FP is saved at, None when not saved on the stack at CFA+n."""
        return stack_slot(self.fp)

    @property
    def ra_offset(self):
        """CFA offset RA is saved at; None when not tracked, fixed or elsewhere."""
        return stack_slot(self.ra)

    @property
    def fp_register(self):
        return register_slot(self.fp)

    @property
    def ra_register(self):
        return register_slot(self.ra)


def stack_slot(rule):
    if rule is not None and rule.base == "cfa" and rule.deref:
        return rule.offset
    return None


def register_slot(rule):
    if rule is not None and rule.base == "register" and not rule.deref and rule.offset == 0:
        return rule.register
    return None


def register_text(number, arch):
    if arch is not None:
        if number == arch.sp:
            return "sp"
        if number == arch.fp:
            return "fp"
    return "r%d" % number


def flex_rule(control, offset):
    """A flex (control word, offset) pair as an SFrameRule.

    Control word: bit 0 reg_p (base is register `control >> 3`, else the
    CFA), bit 1 deref_p (the value is read from base + offset).
    """
    if control & 1:
        return SFrameRule("register", offset, control >> 3, deref=bool(control & 2), control=control)
    return SFrameRule("cfa", offset, None, deref=bool(control & 2), control=control)


def row_rule(rule):
    """An SFrameRule for RA or FP as a plugin.model.rules.Rule."""
    if rule.base == "cfa":
        return Rule(RuleKind.OFFSET if rule.deref else RuleKind.VAL_OFFSET, offset=rule.offset)
    if not rule.deref and rule.offset == 0:
        return Rule(RuleKind.REGISTER, register=rule.register)
    return Rule(RuleKind.EXPRESSION if rule.deref else RuleKind.VAL_EXPRESSION,
                expression=breg(rule.register, rule.offset))


def breg(register, offset):
    """DW_OP_breg<register> <offset>: the value register + offset."""
    if register < 32:
        return bytes([DW_OP_BREG0 + register]) + encode_sleb(offset)
    return bytes([DW_OP_BREGX]) + encode_uleb(register) + encode_sleb(offset)
