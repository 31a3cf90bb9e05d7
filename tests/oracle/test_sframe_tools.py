"""The SFrame decoder against sections written here by real tools.

- SFrame v1: Debian's gcc/gas 2.40 (`-Wa,--gsframe`), checked against
  objdump 2.40 `--sframe` of the same file.
- SFrame v2: `llvm-mc-22 --gsframe`, checked against `llvm-readobj-22
  --sframe`. LLVM 22 writes SFrame for x86-64 only (for AArch64 it omits
  every function: "non-default RA register"), so these are x86-64.

The assembly in LARGE_FUNCTIONS makes both assemblers use 2- and 4-byte FRE
start addresses and 2- and 4-byte data words, which no oracle file has.
"""

import subprocess

import pytest

from plugin.formats.sframe import SFrameSection
from support import build, need_tool, run
from sframe_dumps import (assert_matches_dump, parse_objdump, parse_readobj,
                          sframe_region)

FLAG_SETS = [["-O0"], ["-O2"], ["-O2", "-fomit-frame-pointer"], ["-O1", "-fno-omit-frame-pointer"]]

# big: 70006 bytes, so its FREs need 4-byte start addresses; deep: a CFA
# offset of 100008 (4-byte data word) and 1008 (2-byte), 2-byte starts.
LARGE_FUNCTIONS = """
	.text
	.globl big
	.type big,@function
big:
	.cfi_startproc
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset 6, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register 6
	.skip 70000, 0x90
	leave
	.cfi_def_cfa 7, 8
	ret
	.cfi_endproc
	.size big, .-big

	.globl deep
	.type deep,@function
deep:
	.cfi_startproc
	subq $100000, %rsp
	.cfi_def_cfa_offset 100008
	.skip 300, 0x90
	addq $99000, %rsp
	.cfi_def_cfa_offset 1008
	.skip 10, 0x90
	addq $1000, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size deep, .-deep
"""


def _objdump_sframe(path):
    out = run([need_tool("objdump"), "--sframe", str(path)])
    assert out.returncode == 0, out.stderr
    return parse_objdump(out.stdout)


def _decode(path, relocate):
    region, _ = sframe_region(path.read_bytes(), relocate=relocate)
    return SFrameSection(region)


def _check_lookups(section):
    """find() at every FRE start gives back that FRE (first MASK block for PLTs)."""
    checked = 0
    for fde in section.fdes:
        for fre in section.fres(fde):
            if fre.start_address >= fde.end:
                continue
            found = section.find(fre.start_address)
            assert found is not None
            index, found_fde, found_fre = found
            assert found_fde.index == fde.index and found_fre.index == fre.index
            row = section.row(fde, fre)
            assert row.address <= fre.start_address < row.end <= fde.end
            checked += 1
    return checked


# -- SFrame v1 (gcc 12 + binutils 2.40) --------------------------------------

@pytest.mark.parametrize("flags", FLAG_SETS, ids=[" ".join(f) for f in FLAG_SETS])
def test_v1_executable_matches_objdump(flags):
    need_tool("gcc")
    exe = build("chain.c", flags=[*flags, "-Wa,--gsframe"], name="chain-sframe")
    section = _decode(exe, relocate=False)
    assert section.version == 1
    assert_matches_dump(section, _objdump_sframe(exe), "2.40")
    assert section.lookup == "binary"
    assert _check_lookups(section) > 10


def test_v1_plt_mask_lookup():
    """ld 2.40 describes .plt with a MASK FDE (no rep_size in v1: 16-byte entries)."""
    need_tool("gcc")
    exe = build("chain.c", flags=["-O2", "-Wa,--gsframe"], name="chain-sframe")
    section = _decode(exe, relocate=False)
    masks = [f for f in section.fdes if f.pc_type == "mask"]
    assert masks, "ld wrote no MASK FDE for .plt"
    plt = masks[0]
    starts = sorted(f.start_offset for f in section.fres(plt))
    assert starts[0] == 0 and len(starts) == 2
    for entry in range(plt.size // 16):
        base = plt.start + 16 * entry
        assert section.find(base)[2].start_offset == 0
        assert section.find(base + starts[1])[2].start_offset == starts[1]
        assert section.find(base + 15)[2].start_offset == starts[1]
        row = section.row(plt, section.find(base + 15)[2], pc=base + 15)
        assert (row.address, row.end) == (base + starts[1], base + 16)


@pytest.mark.parametrize("flags", FLAG_SETS[:2], ids=[" ".join(f) for f in FLAG_SETS[:2]])
def test_v1_object_matches_objdump(tmp_path, flags):
    """objdump 2.40 does not relocate .sframe, so the raw section is compared."""
    need_tool("gcc")
    obj = tmp_path / "chain.o"
    from support import FIXTURES
    subprocess.run(["gcc", "-c", *flags, "-Wa,--gsframe", "-o", str(obj),
                    str(FIXTURES / "chain.c")], check=True)
    section = _decode(obj, relocate=False)
    assert section.version == 1 and not section.sorted
    assert_matches_dump(section, _objdump_sframe(obj), "2.40")
    assert section.lookup == "linear"


def test_v1_large_functions_match_objdump(tmp_path):
    need_tool("as")
    src = tmp_path / "large.s"
    src.write_text(LARGE_FUNCTIONS)
    obj = tmp_path / "large.o"
    subprocess.run(["as", "--gsframe", "-o", str(obj), str(src)], check=True)
    section = _decode(obj, relocate=False)
    assert_matches_dump(section, _objdump_sframe(obj), "2.40")
    big, deep = section.fdes
    assert big.fre_type == 4 and deep.fre_type == 2
    assert [f.data_word_size for f in section.fres(deep)] == [1, 4, 2, 1]
    assert section.fres(deep)[1].cfa_offset == 100008


# -- SFrame v2 (llvm-mc-22) ---------------------------------------------------

FRE_TYPE_CODES = {1: 0, 2: 1, 4: 2}
WORD_SIZE_CODES = {1: 0, 2: 1, 4: 2}


def _llvm_v2(tmp_path, asm_text, name):
    mc = need_tool("llvm-mc-22")
    src = tmp_path / (name + ".s")
    src.write_text(asm_text)
    obj = tmp_path / (name + ".o")
    out = run([mc, "--gsframe", "-filetype=obj", "-triple=x86_64-linux-gnu", "-o", str(obj), str(src)])
    assert out.returncode == 0, out.stderr
    dump = run([need_tool("llvm-readobj-22"), "--sframe", str(obj)])
    assert dump.returncode == 0, dump.stderr
    return obj, parse_readobj(dump.stdout)


def _assert_matches_readobj(section, expected):
    h = expected["header"]
    assert section.version == h["Version"]
    assert section.flags == h["Flags"]
    assert section.abi == h["ABI"]
    assert section.fixed_fp_offset == h["CFA fixed FP offset (unused)"]
    assert section.fixed_ra_offset == h["CFA fixed RA offset"]
    assert section.aux_header_len == h["Auxiliary header length"]
    assert (section.num_fdes, section.num_fres) == (h["Num FDEs"], h["Num FREs"])
    assert section.fre_len == h["FRE subsection length"]
    assert section.fde_sub_offset == h["FDE subsection offset"]
    assert section.fre_sub_offset == h["FRE subsection offset"]
    assert len(section.fdes) == len(expected["fdes"])
    rows = 0
    for fde, exp in zip(section.fdes, expected["fdes"]):
        assert fde.start == exp["Start Address"]
        assert fde.size == exp["Size"]
        assert fde.fre_offset - section.fres_start == exp["Start FRE Offset"]
        assert fde.num_fres == exp["Num FREs"]
        assert FRE_TYPE_CODES[fde.fre_type] == exp["FRE Type"]
        assert fde.info == exp["Raw"]
        assert fde.pc_type == ("mask" if exp["FDE Type"] else "inc")
        assert fde.rep_size == exp["Repetitive block size (unused)"]
        fres = section.fres(fde)
        assert len(fres) == len(exp["fres"])
        for fre, want in zip(fres, exp["fres"]):
            assert fre.start_address == want["Start Address"]
            assert fre.ra_mangled == want["Return Address Signed"]
            assert WORD_SIZE_CODES[fre.data_word_size] == want["Offset Size"]
            assert fre.cfa_base == want["Base Register name"].lower()
            assert fre.cfa_offset == want["CFA Offset"]
            ra = fre.ra_offset if fre.ra is not None else section.fixed_ra_offset
            assert ra == want["RA Offset"]
            assert fre.fp_offset == want.get("FP Offset")
            rows += 1
    return rows


def _gcc_assembly(tmp_path, flags):
    need_tool("gcc")
    from support import FIXTURES
    asm = tmp_path / "chain.s"
    subprocess.run(["gcc", "-S", *flags, "-o", str(asm), str(FIXTURES / "chain.c")], check=True)
    return asm.read_text()


@pytest.mark.parametrize("flags", FLAG_SETS, ids=[" ".join(f) for f in FLAG_SETS])
def test_v2_llvm_mc_object_matches_llvm_readobj(tmp_path, flags):
    obj, expected = _llvm_v2(tmp_path, _gcc_assembly(tmp_path, flags), "chain")
    section = _decode(obj, relocate=True)
    assert section.version == 2 and section.pcrel
    assert _assert_matches_readobj(section, expected) > 10


def test_v2_llvm_mc_large_functions_match_llvm_readobj(tmp_path):
    obj, expected = _llvm_v2(tmp_path, LARGE_FUNCTIONS, "large")
    section = _decode(obj, relocate=True)
    assert _assert_matches_readobj(section, expected) == 8
    big, deep = section.fdes
    assert big.fre_type == 4 and deep.fre_type == 2
    assert [f.data_word_size for f in section.fres(deep)] == [1, 4, 2, 1]
    # pc inside the 70000-byte body: CFA is rbp+16, rbp saved at CFA-16.
    index, fde, fre = section.find(big.start + 40000)
    row = section.row(fde, fre)
    arch = section.arch
    assert (row.cfa.register, row.cfa.offset) == (arch.fp, 16)
    assert row.registers[arch.fp].offset == -16 and row.registers[arch.ra].offset == -8
    assert (row.address, row.end) == (big.start + 4, big.start + 0x11175)
