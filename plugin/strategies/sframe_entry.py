"""SFrame spelled out as JSON: what each FDE, FRE and data word means.

Used for the `sframe` source's evidence (entry_json: the facts and rules of
the FDE and FRE a step used) and by render/sframe_dump.py's `unwind tables`
dump (fde_table_json, source_json). Plain functions of the decoded section
(plugin.formats.sframe) and the arch.
"""

from plugin.formats import sframe
from plugin.formats.sframe_records import S390X_CFA_OFFSET_ADJUSTMENT, S390X_CFA_OFFSET_ALIGNMENT_FACTOR


# -- evidence: the FDE and FRE, and what each data word means ------------------

def entry_json(section, index, fde, fre, row, arch):
    """The FDE/FRE facts shown as evidence and by `unwind tables`."""
    entry = {
        "fde_index": index, "fde_offset": fde.offset, "start": fde.start, "end": fde.end,
        "version": section.version, "fde_type": fde.fde_type, "pc_type": fde.pc_type,
        "signal_frame": fde.signal_frame, "num_fres": fde.num_fres,
        "row_start": row.address, "row_end": row.end,
    }
    if fde.pc_type == "mask":
        entry["rep_size"] = section.repetition_size(fde)
    if fde.ra_mangled_key is not None:
        entry["pauth_key"] = fde.ra_mangled_key
    entry.update(fre_json(section, fde, fre, arch))
    entry["rules"] = rules_text(section, fde, fre, arch)
    return entry


def fre_json(section, fde, fre, arch):
    if fre is None:
        return {"fre_index": None, "fre_offset": None, "fre_start": fde.start, "fre_start_offset": 0,
                "cfa_base": None, "data_word_size": None, "data_words": [], "ra_mangled": False,
                "outermost": True}
    return {"fre_index": fre.index, "fre_offset": fre.offset, "fre_start": fre.start_address,
            "fre_start_offset": fre.start_offset, "cfa_base": _base_name(fre, arch),
            "data_word_size": fre.data_word_size,
            "data_words": [{"index": i, "value": w, "meaning": m}
                           for i, (w, m) in enumerate(zip(fre.words, word_meanings(section, fde, fre, arch)))],
            "ra_mangled": fre.ra_mangled, "outermost": fre.outermost}


def _base_name(fre, arch):
    return arch.name_of(fre.cfa.register) if fre.cfa is not None else fre.cfa_base


def rules_text(section, fde, fre, arch):
    """{"cfa", "fp", "ra"}: each rule spelled out, e.g. "CFA = *(rbp-16)"."""
    fp, ra = arch.name_of(arch.fp), arch.name_of(arch.ra)
    if fre is None or fre.outermost:
        return {"cfa": "CFA not described (outermost frame)", "fp": "%s not described" % fp,
                "ra": "%s undefined: outermost frame" % ra}
    cfa = fre.cfa
    out = {"cfa": "CFA = " + _value_text(cfa.register, cfa.offset, cfa.deref, arch)}
    if fre.fp is not None:
        out["fp"] = "%s = %s" % (fp, _slot_text(fre.fp, arch))
    elif section.fixed_fp_offset != 0:
        out["fp"] = "%s = *(CFA%+d) (fixed FP offset of the header)" % (fp, section.fixed_fp_offset)
    else:
        out["fp"] = "%s unchanged (not saved here)" % fp
    if fre.ra is not None:
        out["ra"] = "%s = %s" % (ra, _slot_text(fre.ra, arch))
    elif section.fixed_ra_offset != 0:
        out["ra"] = "%s = *(CFA%+d) (fixed RA offset of the header)" % (ra, section.fixed_ra_offset)
    else:
        out["ra"] = "%s unchanged: the return address is still in %s" % (ra, ra)
    if fre.ra_mangled:
        out["ra"] += ", signed: strip pointer authentication"
    return out


def _value_text(register, offset, deref, arch):
    core = "%s%+d" % (arch.name_of(register), offset)
    return "*(%s)" % core if deref else core


def _slot_text(rule, arch):
    if rule.base == "cfa":
        core = "CFA%+d" % rule.offset if rule.offset else "CFA"
        return "*(%s)" % core if rule.deref else core
    if not rule.deref and rule.offset == 0:
        return "%s (saved in that register)" % arch.name_of(rule.register)
    return _value_text(rule.register, rule.offset, rule.deref, arch)


def word_meanings(section, fde, fre, arch):
    """One phrase per data word of fre saying what the word is."""
    words = fre.words
    if not words:
        return []
    if fde.fde_type == "flex":
        return _flex_meanings(fre, words, arch)
    out = []
    base = "sp" if fre.cfa_base == "sp" else "fp"
    if section.abi == sframe.ABI_S390X_ENDIAN_BIG:
        out.append("CFA offset from %s, stored scaled: %d*%d%+d = %d" % (
            base, words[0], S390X_CFA_OFFSET_ALIGNMENT_FACTOR, -S390X_CFA_OFFSET_ADJUSTMENT,
            fre.cfa.offset))
    else:
        out.append("CFA offset from %s (%s): CFA = %s" % (
            base, arch.name_of(fre.cfa.register), _value_text(fre.cfa.register, fre.cfa.offset, False, arch)))
    if section.fixed_ra_offset == 0 and len(words) > len(out):
        if fre.ra_padding:
            out.append("padding: the return address is not saved (still in %s)" % arch.name_of(arch.ra))
        else:
            out.append("return address %s" % _saved_phrase(fre.ra, arch))
    if section.fixed_fp_offset == 0 and len(words) > len(out):
        out.append("frame pointer %s" % _saved_phrase(fre.fp, arch))
    while len(out) < len(words):
        out.append("unused")
    return out


def _saved_phrase(rule, arch):
    if rule is None:
        return "not saved"
    if rule.base == "cfa" and rule.deref:
        return "saved at CFA%+d" % rule.offset
    return "= " + _slot_text(rule, arch)


def _flex_meanings(fre, words, arch):
    mask = (1 << (8 * fre.data_word_size)) - 1
    out = []

    def pair(what, control):
        parts = []
        if control & 1:
            parts.append("base register %s" % arch.name_of(control >> 3))
        else:
            parts.append("base CFA")
        if control & 2:
            parts.append("dereferenced")
        return "%s control word 0x%x: %s" % (what, control, ", ".join(parts))

    out.append(pair("CFA", words[0] & mask))
    out.append("CFA offset: CFA = %s" % _value_text(fre.cfa.register, fre.cfa.offset, fre.cfa.deref, arch))
    i = 2
    if len(words) > i:
        if fre.ra_padding:
            out.append("padding: the return address keeps its default rule; the FP pair follows")
            i += 1
        elif len(words) > i + 1:
            out.append(pair("RA", words[i] & mask))
            out.append("RA offset: %s = %s" % (arch.name_of(arch.ra), _slot_text(fre.ra, arch)))
            i += 2
    if len(words) > i + 1:
        out.append(pair("FP", words[i] & mask))
        out.append("FP offset: %s = %s" % (arch.name_of(arch.fp), _slot_text(fre.fp, arch)))
        i += 2
    while len(out) < len(words):
        out.append("unused")
    return out


# -- `unwind tables`: every FDE and FRE, in the JSON shape of the CFI entries ----

def source_json(module, name, section, entries):
    """The {"kind": "sframe", ...} source of `unwind tables` for the section called `name`."""
    return {"kind": "sframe", "module": module.name, "section": name, "address": section.address,
            "found_by": module.tables[name].found_by, "version": section.version,
            "abi": section.abi_name, "flags": section.flags,
            "fixed_fp_offset": section.fixed_fp_offset, "fixed_ra_offset": section.fixed_ra_offset,
            "lookup": section.lookup, "entries": entries}


def fde_table_json(section, index, fde, arch, address=None):
    """One FDE with its rows (all of them, or the one in force at address).

    rows[i], rows_text[i] and fres[i] describe the same FRE. A MASK FDE's
    rows are shown for its first repetition block unless an address says
    which block.
    """
    fres = section.fres(fde)
    if address is not None:
        found = section.find(address)
        if found is None or found[1] is not fde:
            chosen = []
        else:
            chosen = [found[2]]
    else:
        chosen = list(fres) if fres else ([None] if fde.outermost else [])
    rows, fre_out = [], []
    for fre in chosen:
        row = section.row(fde, fre, address)
        rows.append(row)
        item = fre_json(section, fde, fre, arch)
        item["rules"] = rules_text(section, fde, fre, arch)
        fre_out.append(item)
    entry = {"start": fde.start, "end": fde.end, "fde_index": index, "fde_offset": fde.offset,
             "fde_type": fde.fde_type, "pc_type": fde.pc_type, "signal_frame": fde.signal_frame,
             "num_fres": fde.num_fres, "outermost": fde.outermost,
             "rows": [r.to_json(arch) for r in rows], "rows_text": [r.text(arch) for r in rows],
             "fres": fre_out}
    if fde.pc_type == "mask":
        entry["rep_size"] = section.repetition_size(fde)
    if fde.ra_mangled_key is not None:
        entry["pauth_key"] = fde.ra_mangled_key
    return entry
