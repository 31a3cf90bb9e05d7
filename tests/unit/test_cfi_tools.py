"""Self-tests of the readelf / llvm-dwarfdump parsers in tests/helpers/cfi_dumps.py, on small texts."""

from cfi_dumps import (collapse, llvm_expression, llvm_names, llvm_row_key, parse_llvm, parse_readelf,
                       readelf_names, readelf_row_key)


# --- self-tests on small texts ---------------------------------------------------------

def test_readelf_parser():
    text = """Contents of the .eh_frame section:


00000000 0000000000000014 00000000 CIE "zR" cf=1 df=-8 ra=16
   LOC           CFA      ra    
0000000000000000 rsp+8    c-8   

00000134 0000000000000020 00000108 FDE cie=00000030 pc=0000000000001450..00000000000014a5
   LOC           CFA      rbx   rbp   r12   ra    
0000000000001450 rsp+8    u     u     u     c-8   
0000000000001451 exp      u     c-16  rbx   c-8   

00000158 ZERO terminator
"""
    parsed = parse_readelf(text)[".eh_frame"]
    assert parsed[0].kind == "CIE" and parsed[0].ra == 16
    fde = parsed[0x134]
    assert (fde.cie, fde.start, fde.end) == (0x30, 0x1450, 0x14A5)
    names = readelf_names(type("A", (), {"name": "x86_64"}))
    keys = [readelf_row_key(c, cells, 16, names) for _, c, cells in fde.rows]
    assert keys[0] == (("reg", 7, 8), frozenset({(16, ("offset", -8))}))
    assert keys[1] == (("expr",), frozenset({(16, ("offset", -8)), (6, ("offset", -16)),
                                             (12, ("register", 3))}))


def test_llvm_parser():
    text = """.eh_frame contents:

00000048 00000024 0000001c FDE cie=00000030 pc=00001020...000010e0
  Format:       DWARF32
  DW_CFA_def_cfa_offset: +16

  0x1020: CFA=RSP+16: RIP=[CFA-8]
  0x1030: CFA=DW_OP_breg7 RSP+8, DW_OP_lit15, DW_OP_and: RBP=[DW_OP_breg6 RBP+0], RIP=[CFA-8]
"""
    fde = parse_llvm(text)[".eh_frame"][0x48]
    names = llvm_names(type("A", (), {"name": "x86_64"}))
    assert (fde.start, fde.end) == (0x1020, 0x10E0)
    assert llvm_row_key(fde.rows[0][1], names) == (("reg", 7, 16),
                                                  frozenset({(16, ("offset", -8))}), False)
    cfa, rules, _ = llvm_row_key(fde.rows[1][1], names)
    assert cfa == ("expr", "DW_OP_breg7 RSP+8, DW_OP_lit15, DW_OP_and")
    assert dict(rules)[6] == ("expression", "DW_OP_breg6 RBP+0")
    assert llvm_expression(bytes([0x77, 0x08, 0x3F, 0x1A]), {7: "RSP"}) == \
        "DW_OP_breg7 RSP+8, DW_OP_lit15, DW_OP_and"


def test_collapse():
    assert collapse([(1, "a"), (2, "a"), (3, "b"), (3, "c"), (4, "c"), (5, "a")]) == \
        [(1, "a"), (3, "c"), (5, "a")]
