"""Tests of the SFrame dump helpers in tests/helpers/sframe_dumps.py."""

from sframe_dumps import build_sframe, fde, fre, parse_objdump, parse_readobj, region_of


# -- tests of the helpers ------------------------------------------------------

def test_parse_objdump_reads_246_text():
    text = """
  Header :

    Version: SFRAME_VERSION_3
    Flags: SFRAME_F_FDE_SORTED,
           SFRAME_F_FDE_FUNC_START_PCREL
    CFA fixed RA offset: -8
    Num FDEs: 2
    Num FREs: 3

  Function Index :

    func idx [0]: pc = 0x1030, size = 80 bytes
    STARTPC[m]      CFA       FP        RA           
    0000000000000000  sp+8      u         f            
    000000000000000b  sp+16     u         f            

    func idx [1]: pc = 0x1200, size = 145 bytes, attr = "SF", pauth = B key
    STARTPC         CFA       FP        RA           
    0000000000001200  RA undefined
"""
    parsed = parse_objdump(text)
    assert parsed["header"] == {"version": 3, "flags": ["SFRAME_F_FDE_SORTED",
                                                        "SFRAME_F_FDE_FUNC_START_PCREL"],
                                "fixed_ra": -8, "fixed_fp": None, "num_fdes": 2, "num_fres": 3}
    f0, f1 = parsed["functions"]
    assert f0["mask"] and f0["rows"] == [(0, ("sp+8", "u", "f")), (0xb, ("sp+16", "u", "f"))]
    assert f1["attr"] == "SF" and f1["pauth_b"] and not f1["mask"]
    assert f1["rows"] == [(0x1200, ("RA undefined",))]


def test_parse_objdump_reads_dejagnu_regexp_form():
    text = "#...\n    Flags: NONE\n    func idx \\[1\\]: pc = 0x401010, size = 16 bytes\n" \
           "    STARTPC\\[m\\] +CFA +FP +RA +\n    000000000000000b +sp\\+16 +c-72 +f +\n"
    parsed = parse_objdump(text, regexp=True)
    assert parsed["header"]["flags"] == []
    assert parsed["functions"][0]["mask"]
    assert parsed["functions"][0]["rows"] == [(0xb, ("sp+16", "c-72", "f"))]


def test_parse_readobj_reads_fields():
    text = """
  Header {
    Version: V2 (0x2)
    Flags [ (0x4)
      FDEFuncStartPCRel (0x4)
    ]
    CFA fixed RA offset: -8
    Num FDEs: 1
  }
  Function Index [
    FuncDescEntry [0] {
      PC {
        Start Address: 0x1E0
      }
      Size: 0x3E
      Info {
        FRE Type: Addr2 (0x1)
      }
      FREs [
        Frame Row Entry {
          Start Address: 0x1E4
          Return Address Signed: No
          Offset Size: B4 (0x2)
          Base Register: FP (0x0)
          CFA Offset: 100008
          FP Offset: -16
        }
      ]
    }
  ]
"""
    parsed = parse_readobj(text)
    assert parsed["header"]["Version"] == 2 and parsed["header"]["CFA fixed RA offset"] == -8
    assert parsed["header"]["Flags"] == 4
    (only,) = parsed["fdes"]
    assert only["Start Address"] == 0x1E0 and only["Size"] == 0x3E and only["FRE Type"] == 1
    (row,) = only["fres"]
    assert row == {"Start Address": 0x1E4, "Return Address Signed": False, "Offset Size": 2,
                   "Base Register": 0, "Base Register name": "FP", "CFA Offset": 100008,
                   "FP Offset": -16}


def test_build_sframe_round_trips_through_the_decoder():
    from plugin.formats.sframe import SFrameSection
    data = build_sframe(2, 3, [fde(0x1000, 16, [fre(0, [8]), fre(4, [16, -16])])],
                        fixed_ra=-8, address=0x2000)
    section = SFrameSection(region_of(data, 0x2000))
    (only,) = section.fdes
    assert (only.start, only.size, only.num_fres) == (0x1000, 16, 2)
    assert [f.words for f in section.fres(only)] == [[8], [16, -16]]
