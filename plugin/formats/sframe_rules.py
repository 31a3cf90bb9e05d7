"""How an SFrame FRE's data words become its CFA, RA and FP rules (default and flex FDEs).

A part of SFrameSection (plugin/formats/sframe.py), kept apart so each file
holds one concern: the section reader finds FDEs and FREs, this reads what
an FRE's words say. The methods use the section's header fields (ABI,
version, fixed FP and RA offsets) and its architecture.
"""

from plugin.formats.sframe_records import (ABI_S390X_ENDIAN_BIG, RA_PADDING, S390X_CFA_OFFSET_ADJUSTMENT,
                                           S390X_CFA_OFFSET_ALIGNMENT_FACTOR, VERSION_2, SFrameRule,
                                           flex_rule, register_text)


class FreRules:
    """The FRE interpretation methods of SFrameSection."""

    def _interpret(self, fde, fre):
        """Fill in the FRE's CFA / RA / FP rules from its data words."""
        if fre.ra_mangled:
            fre.notes.append("the return address is signed (AArch64 PAC, key %s): strip the "
                             "pointer-authentication bits before using it"
                             % (fde.ra_mangled_key or "A"))
        if fre.outermost:
            fre.notes.append("no data words: the return address is undefined (outermost frame)")
            return
        if fde.fde_type == "default":
            self._interpret_default(fde, fre)
        elif fde.fde_type == "flex":
            self._interpret_flex(fde, fre)
        else:
            raise self._error(fde.offset, "FDE %d has FDE type %d, which this decoder does not know"
                              % (fde.index, fde.info2 & 0x1F))

    def _cfa_offset(self, stored):
        if self.abi == ABI_S390X_ENDIAN_BIG:
            return stored * S390X_CFA_OFFSET_ALIGNMENT_FACTOR - S390X_CFA_OFFSET_ADJUSTMENT
        return stored

    def _interpret_default(self, fde, fre):
        words = fre.words
        base_register = self.arch.sp if fre.cfa_base == "sp" else self.arch.fp
        fre.cfa = SFrameRule("register", self._cfa_offset(words[0]), base_register, deref=False)
        index = 1
        # RA has a data word only when the header gives no fixed RA offset
        # (AMD64 fixes it at CFA-8); FP likewise. Then RA comes before FP.
        if self.fixed_ra_offset == 0:
            if len(words) > index:
                fre.ra = self._default_slot(words[index])
                if words[index] == RA_PADDING:
                    fre.ra = None
                    fre.ra_padding = True
            index += 1
        if self.fixed_fp_offset == 0 and len(words) > index:
            fre.fp = self._default_slot(words[index])

    def _default_slot(self, value):
        # s390x v2 only: an odd value is a DWARF register number times 2
        # plus 1 (saved in that register); stack offsets are even.
        if self.abi == ABI_S390X_ENDIAN_BIG and self.version == VERSION_2 and value & 1:
            return SFrameRule("register", 0, value >> 1, deref=False)
        return SFrameRule("cfa", value, None, deref=True)

    def _interpret_flex(self, fde, fre):
        words = fre.words
        mask = (1 << (8 * fre.data_word_size)) - 1
        if len(words) < 2:
            raise self._error(fre.offset, "flex FRE %d of FDE %d has %d data word(s); the CFA "
                              "needs a control word and an offset" % (fre.index, fde.index, len(words)))
        cfa = flex_rule(words[0] & mask, words[1])
        if cfa.base != "register":
            raise self._error(fre.offset, "flex FRE %d of FDE %d: the CFA rule names no base "
                              "register (control word 0x%x)" % (fre.index, fde.index, words[0] & mask))
        fre.cfa = SFrameRule("register", self._cfa_offset(cfa.offset), cfa.register,
                             deref=cfa.deref, control=cfa.control)
        fre.cfa_base = register_text(cfa.register, self.arch)
        fp_index = 4
        if len(words) > 2:
            ra_control = words[2] & mask
            if ra_control == RA_PADDING:
                # One padding word instead of the RA pair: RA keeps its
                # default rule and the FP pair starts one word earlier.
                fre.ra_padding = True
                fp_index = 3
            elif len(words) > 3:
                fre.ra = flex_rule(ra_control, words[3])
        if len(words) > fp_index + 1:
            fre.fp = flex_rule(words[fp_index] & mask, words[fp_index + 1])
