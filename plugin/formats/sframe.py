"""SFrame (.sframe) decoder: versions 1, 2 and 3.

An SFrame section is a header, an array of function descriptor entries
(FDEs) and a sub-section of frame row entries (FREs). Each FRE says, from
its start address on, how to find the CFA (SP or FP plus an offset) and
where the frame pointer and return address were saved. The layout, per
the SFrame specification (version 3, with its history sections) and
binutils' sframe.h:

    header (28 bytes + auxiliary header, all versions)
      u16 magic 0xdee2 (its byte order is the section's), u8 version,
      u8 flags, u8 abi, s8 fixed FP offset, s8 fixed RA offset,
      u8 aux header length, u32 num_fdes, num_fres, fre_len, fdeoff, freoff
      (fdeoff and freoff count from the end of the header)
    v1 FDE (17 bytes): s32 start, u32 size, u32 fre_off, u32 num_fres, u8 info
    v2 FDE (20 bytes): the v1 fields, u8 rep_size, u16 padding
    v3 FDE index (16 bytes): s64 start, u32 size, u32 fre_off; its attribute
      (u16 num_fres, u8 info, u8 info2, u8 rep_size) opens the function's
      FRE block, and the FREs follow it
    FRE: u8/u16/u32 start offset, u8 info, N data words of 1/2/4 bytes

Nothing here knows about unwinding policy: the decoder gives FDEs, FREs,
the lookup of the FRE in force at a pc and the translation of an FRE into
a plugin.model.rules.Row. Every byte is read through plugin.memory, every count
is checked against the section before it drives a loop, and bad input
raises plugin.errors.DecodeError only.
"""

import bisect
from plugin import arch as arches
from plugin.errors import DecodeError, DecodeKind
from plugin.memory import Region
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.formats.sframe_rules import FreRules
from plugin.formats.sframe_records import (ABI_AARCH64_ENDIAN_BIG, ABI_AARCH64_ENDIAN_LITTLE, ABI_AMD64_ENDIAN_LITTLE, ABI_ARCH_NAMES, ABI_NAMES, ABI_S390X_ENDIAN_BIG, ADDRESS_MASK, DATA_WORD_SIZES, FDE_SIZES, FDE_TYPE_DEFAULT, FDE_TYPE_FLEX, FRE_TYPE_SIZES, F_FDE_FUNC_START_PCREL, F_FDE_SORTED, HEADER_SIZE, PC_TYPE_MASK, S390X_SP_VAL_OFFSET, SFrameFDE, SFrameFRE, V3_ATTR_SIZE, VERSION_1, VERSION_2, VERSION_3, row_rule)


class SFrameSection(FreRules):
    """A decoded .sframe section.

    region: a plugin.memory.Region over the section; region.address is its
    runtime address, so function starts come out as runtime addresses.
    arch: a plugin.arch Arch, or None to take it from the header's ABI.
    The header is checked when the object is built; FDEs are decoded on
    first use and FREs per FDE on first use, then kept.
    """

    def __init__(self, region, arch=None):
        self.name = region.name
        self.address = region.address
        self.size = region.size
        self.byteorder = self._byteorder_from_magic(region)
        self.region = self._with_byteorder(region, self.byteorder)
        self._read_header()
        self.arch = arch if arch is not None else arches.BY_NAME[ABI_ARCH_NAMES[self.abi]]
        self._fdes = None
        self._fres = {}
        self._starts = None
        self._lookup = None

    # -- header ------------------------------------------------------------

    def _error(self, offset, cause, kind=DecodeKind.MALFORMED):
        return DecodeError(self.name, offset, cause, kind)

    def _byteorder_from_magic(self, region):
        if region.size < 2:
            raise self._error(0, "section of %d bytes is too short for an SFrame preamble" % region.size,
                              DecodeKind.TRUNCATED)
        magic = region.read(0, 2)
        if magic == b"\xe2\xde":
            return "little"
        if magic == b"\xde\xe2":
            return "big"
        raise self._error(0, "bad magic 0x%s (want 0xdee2 in either byte order)" % magic.hex())

    @staticmethod
    def _with_byteorder(region, byteorder):
        """The region itself, or a view of it read in the section's byte order."""
        if region.byteorder == byteorder:
            return region
        return Region(region.name, region.address, region.size,
                      lambda address, size: region.read(address - region.address, size),
                      byteorder)

    def _read_header(self):
        if self.size < HEADER_SIZE:
            raise self._error(0, "section of %d bytes is shorter than the %d-byte header"
                              % (self.size, HEADER_SIZE), DecodeKind.TRUNCATED)
        cur = self.region.cursor(2)
        self.version = cur.u8()
        self.flags = cur.u8()
        self.abi = cur.u8()
        self.fixed_fp_offset = cur.s8()
        self.fixed_ra_offset = cur.s8()
        self.aux_header_len = cur.u8()
        self.num_fdes = cur.u32()
        self.num_fres = cur.u32()
        self.fre_len = cur.u32()
        self.fde_sub_offset = cur.u32()
        self.fre_sub_offset = cur.u32()
        if self.version not in FDE_SIZES:
            raise self._error(2, "unknown SFrame version %d" % self.version, DecodeKind.UNSUPPORTED)
        if self.abi not in ABI_NAMES:
            raise self._error(4, "unknown ABI/arch identifier %d" % self.abi, DecodeKind.UNSUPPORTED)
        self.abi_name = ABI_NAMES[self.abi]
        self.header_size = HEADER_SIZE + self.aux_header_len
        if self.header_size > self.size:
            raise self._error(7, "auxiliary header of %d bytes runs past the end"
                              % self.aux_header_len, DecodeKind.TRUNCATED)
        self.fde_size = FDE_SIZES[self.version]
        self.fdes_start = self.header_size + self.fde_sub_offset
        fdes_end = self.fdes_start + self.num_fdes * self.fde_size
        if fdes_end > self.size:
            raise self._error(8, "%d FDEs of %d bytes from offset 0x%x run past the end (size 0x%x)"
                              % (self.num_fdes, self.fde_size, self.fdes_start, self.size), DecodeKind.TRUNCATED)
        self.fres_start = self.header_size + self.fre_sub_offset
        self.fres_end = self.fres_start + self.fre_len
        if self.fres_end > self.size:
            raise self._error(16, "FRE sub-section [0x%x, 0x%x) runs past the end (size 0x%x)"
                              % (self.fres_start, self.fres_end, self.size), DecodeKind.TRUNCATED)
        # The smallest FRE is 2 bytes: a 1-byte start and the info byte.
        if 2 * self.num_fres > self.fre_len:
            raise self._error(12, "%d FREs cannot fit in an FRE sub-section of %d bytes"
                              % (self.num_fres, self.fre_len), DecodeKind.TRUNCATED)

    @property
    def sorted(self):
        return bool(self.flags & F_FDE_SORTED)

    @property
    def pcrel(self):
        """Function starts are relative to their own field (v2 erratum 1, v3)."""
        return self.version >= VERSION_2 and bool(self.flags & F_FDE_FUNC_START_PCREL)

    # -- FDEs --------------------------------------------------------------

    @property
    def fdes(self):
        if self._fdes is None:
            self._fdes = [self._read_fde(i) for i in range(self.num_fdes)]
            starts = [fde.start for fde in self._fdes]
            # Binary search only where the producer says the index is sorted
            # and it really is: a lying flag must not hide functions.
            if self.sorted and all(a <= b for a, b in zip(starts, starts[1:])):
                self._lookup = "binary"
                self._starts = starts
            else:
                self._lookup = "linear"
        return self._fdes

    @property
    def lookup(self):
        """How find_fde searches: "binary" (sorted flag set and true) or "linear"."""
        if self._fdes is None:
            self.fdes              # decoding the FDEs settles it
        return self._lookup

    def _read_fde(self, index):
        offset = self.fdes_start + index * self.fde_size
        cur = self.region.cursor(offset)
        if self.version == VERSION_3:
            start_field = cur.s64()
            size = cur.u32()
            fre_off = cur.u32()
            attr_offset = self._fre_block_offset(offset, fre_off, V3_ATTR_SIZE)
            attr = self.region.cursor(attr_offset)
            num_fres = attr.u16()
            info = attr.u8()
            info2 = attr.u8()
            rep_size = attr.u8()
            first_fre = attr_offset + V3_ATTR_SIZE
        else:
            start_field = cur.s32()
            size = cur.u32()
            fre_off = cur.u32()
            num_fres = cur.u32()
            info = cur.u8()
            rep_size = cur.u8() if self.version == VERSION_2 else 0
            info2 = None
            attr_offset = None
            first_fre = self._fre_block_offset(offset, fre_off, 0)
        fre_type = info & 0xF
        if fre_type not in FRE_TYPE_SIZES:
            raise self._error(offset, "FDE %d: unknown FRE type %d" % (index, fre_type), DecodeKind.UNSUPPORTED)
        if num_fres * 2 > self.fres_end - first_fre:
            raise self._error(offset, "FDE %d: %d FREs cannot fit between 0x%x and the end of the "
                              "FRE sub-section (0x%x)" % (index, num_fres, first_fre, self.fres_end),
                              DecodeKind.TRUNCATED)
        base = self.address + offset if self.pcrel else self.address
        start = (base + start_field) & ADDRESS_MASK
        pc_type = "mask" if (info >> 4) & 1 == PC_TYPE_MASK else "inc"
        if self.version == VERSION_3:
            kind = info2 & 0x1F
            fde_type = {FDE_TYPE_DEFAULT: "default", FDE_TYPE_FLEX: "flex"}.get(kind, "type-%d" % kind)
            signal = bool(info >> 7 & 1)
        else:
            fde_type = "default"
            signal = False
        key = None
        if self.abi in (ABI_AARCH64_ENDIAN_BIG, ABI_AARCH64_ENDIAN_LITTLE):
            key = "B" if info >> 5 & 1 else "A"
        return SFrameFDE(
            index=index, offset=offset, start=start, size=size, end=start + size,
            fre_offset=first_fre, num_fres=num_fres, fre_type=FRE_TYPE_SIZES[fre_type],
            pc_type=pc_type, rep_size=rep_size, fde_type=fde_type, signal_frame=signal,
            ra_mangled_key=key, info=info, info2=info2, attr_offset=attr_offset,
            start_field=start_field,
            outermost=(self.version == VERSION_3 and fde_type == "default" and num_fres == 0))

    def _fre_block_offset(self, fde_offset, fre_off, need):
        """Section offset of a function's FRE block, checked to lie in the FRE sub-section."""
        offset = self.fres_start + fre_off
        if offset + need > self.fres_end:
            raise self._error(fde_offset, "FRE offset 0x%x points past the FRE sub-section "
                              "(length 0x%x)" % (fre_off, self.fre_len))
        return offset

    # -- FREs --------------------------------------------------------------

    def fres(self, fde):
        """The FREs of `fde`, decoded once."""
        cached = self._fres.get(fde.index)
        if cached is None:
            cached = self._read_fres(fde)
            self._fres[fde.index] = cached
        return cached

    def _read_fres(self, fde):
        cur = self.region.cursor(fde.fre_offset)
        out = []
        for index in range(fde.num_fres):
            offset = cur.pos
            start_offset = cur.uint(fde.fre_type)
            info = cur.u8()
            count = info >> 1 & 0xF
            size_code = info >> 5 & 0x3
            if size_code not in DATA_WORD_SIZES:
                raise self._error(offset, "FRE %d of FDE %d: unknown data-word size code %d"
                                  % (index, fde.index, size_code), DecodeKind.UNSUPPORTED)
            size = DATA_WORD_SIZES[size_code]
            if cur.pos + count * size > self.fres_end:
                raise self._error(offset, "FRE %d of FDE %d runs past the FRE sub-section"
                                  % (index, fde.index), DecodeKind.TRUNCATED)
            words = [cur.sint(size) for _ in range(count)]
            fre = SFrameFRE(
                index=index, offset=offset, start_offset=start_offset,
                start_address=(fde.start + start_offset) & ADDRESS_MASK,
                info=info, cfa_base="sp" if info & 1 else "fp", data_word_size=size,
                words=words, ra_mangled=bool(info >> 7 & 1), outermost=(count == 0))
            self._interpret(fde, fre)
            out.append(fre)
        return out

    # -- lookup ------------------------------------------------------------

    def find_fde(self, pc):
        """(index, fde) of the function covering `pc`, or None."""
        fdes = self.fdes
        if self._lookup == "binary":
            last = bisect.bisect_right(self._starts, pc) - 1
            # Several functions may share a start (an empty one beside a real
            # one): try each of them, nearest first.
            i = last
            while i >= 0 and self._starts[i] == self._starts[last]:
                if fdes[i].contains(pc):
                    return i, fdes[i]
                i -= 1
            return None
        for fde in fdes:
            if fde.contains(pc):
                return fde.index, fde
        return None

    def find(self, pc):
        """(index, fde, fre) in force at `pc`, or None.

        For an outermost v3 FDE (no FREs) the answer is (index, fde, None):
        row(fde, None) then says the return address is undefined.
        """
        found = self.find_fde(pc)
        if found is None:
            return None
        index, fde = found
        fres = self.fres(fde)
        if not fres:
            return (index, fde, None) if fde.outermost else None
        fre = self._fre_at(fde, fres, pc)
        return None if fre is None else (index, fde, fre)

    def repetition_size(self, fde):
        """Block size a MASK FDE's FREs repeat with.

        v1 has no rep_size field. Its only producer (ld 2.40) wrote MASK FDEs
        for the x86-64 .plt, whose entries are 16 bytes: the value v2 then
        stored, and the size libsframe 2.40's lookup comment assumes.
        """
        if fde.rep_size:
            return fde.rep_size
        if self.version == VERSION_1 and self.abi == ABI_AMD64_ENDIAN_LITTLE:
            return 16
        raise self._error(fde.offset, "FDE %d has PC type MASK but a repetition size of 0"
                          % fde.index)

    def _fre_at(self, fde, fres, pc):
        offset = pc - fde.start
        if fde.pc_type == "mask":
            # PLT-like stubs: one FRE list repeats every rep_size bytes.
            offset %= self.repetition_size(fde)
        best = None
        for fre in fres:
            if fre.start_offset <= offset and (best is None or fre.start_offset >= best.start_offset):
                best = fre
        return best

    # -- rows --------------------------------------------------------------

    def row(self, fde, fre, pc=None):
        """The FRE as a plugin.model.rules.Row.

        Row.address is the FRE's start and Row.end the next FRE's start or
        the function's end. For a MASK FDE give `pc` to get the range of the
        repetition block pc is in.
        """
        arch = self.arch
        start, end = self._row_range(fde, fre, pc)
        if fre is None or fre.outermost:
            if fre is None and not fde.outermost:
                raise ValueError("row() needs an FRE unless the FDE marks an outermost frame")
            # Nothing locates the CFA here; sp+0 stands in so the Row is
            # well formed, and the undefined RA ends the unwind.
            return Row(address=start, end=end, cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=0),
                       registers={arch.ra: Rule(RuleKind.UNDEFINED)},
                       ra_signed=bool(fre is not None and fre.ra_mangled))
        cfa = fre.cfa
        registers = {}
        if fre.ra is not None:
            registers[arch.ra] = row_rule(fre.ra)
        elif self.fixed_ra_offset != 0:
            registers[arch.ra] = Rule(RuleKind.OFFSET, offset=self.fixed_ra_offset)
        else:
            # AArch64 and s390x: an untracked RA is still in the link register.
            registers[arch.ra] = Rule(RuleKind.SAME)
        if fre.fp is not None:
            registers[arch.fp] = row_rule(fre.fp)
        elif self.fixed_fp_offset != 0:
            registers[arch.fp] = Rule(RuleKind.OFFSET, offset=self.fixed_fp_offset)
        if self.abi == ABI_S390X_ENDIAN_BIG:
            registers[arch.sp] = Rule(RuleKind.VAL_OFFSET, offset=S390X_SP_VAL_OFFSET)
        return Row(address=start, end=end,
                   cfa=CfaRule(CfaKind.REGISTER, register=cfa.register, offset=cfa.offset, deref=cfa.deref),
                   registers=registers, ra_signed=fre.ra_mangled)

    def _row_range(self, fde, fre, pc):
        if fre is None:
            return fde.start, fde.end
        fres = self.fres(fde)
        following = [f.start_offset for f in fres if f.start_offset > fre.start_offset]
        next_offset = min(following) if following else None
        if fde.pc_type == "mask" and pc is not None:
            rep = self.repetition_size(fde)
            block = fde.start + (pc - fde.start) // rep * rep
            block_end = min(block + rep, fde.end)
            end = block_end if next_offset is None else min(block + next_offset, block_end)
            return block + fre.start_offset, end
        end = fde.end if next_offset is None else fde.start + next_offset
        return fre.start_address, end
