"""`python -m plugin validate` against planted table errors, their correct twins, and linkers' PLT rows.

The fixture's wrong variant carries four deliberate CFI mistakes (a push
without .cfi_adjust_cfa_offset, a wrong CFA after leave, a register saved
elsewhere than the table says, an early return without remember/restore);
GNU as turns the same directives into SFrame with --gsframe. The oracle for
"where the error is" is the assembler's own symbol table (bad_N_begin and
bad_N_end labels, read with nm) and objdump's instruction list: validate must
report exactly the instructions between each pair, and nothing in the twin.
"""

import subprocess

from support import ROOT, build, need_tool, oracle_dir
from validate_support import PLANTED, planted_and_twin, planted_ranges, validate, wrong

planted, twin = planted_and_twin(PLANTED, ["-shared", "-nostdlib", "-Wa,--gsframe"])


def test_every_planted_cfi_error_is_found_at_its_exact_instructions(planted):
    report = validate(planted)
    expected = planted_ranges(planted, (1, 2, 3, 4))
    assert len(expected) == 15
    assert wrong(report, "cfi") == expected
    assert report["unknown"] == 0 and report["functions"] >= 6


def test_every_planted_error_sframe_can_express_is_found(planted):
    """SFrame has no rule for rbx, so mistake 3 cannot show; the other three must, exactly."""
    report = validate(planted)
    assert wrong(report, "sframe") == planted_ranges(planted, (1, 2, 4))


def test_the_correct_twin_has_no_disagreement(twin):
    report = validate(twin)
    assert report["disagreements"] == []
    assert report["sources"]["cfi"]["wrong"] == 0 and report["sources"]["sframe"]["wrong"] == 0
    assert report["sources"]["cfi"]["right"] >= 45 and report["sources"]["sframe"]["right"] >= 35


def test_disagreements_name_the_item_and_both_sides(planted):
    report = validate(planted, "--function", "wrong_after_leave")
    [cfi] = [d for d in report["disagreements"] if d["source"] == "cfi"]
    assert cfi["instruction"] == "ret"
    [item] = cfi["items"]
    assert (item["item"], item["table"], item["analysis"]) == ("cfa", "rsp+16", "rsp+8")
    saves = [d for d in validate(planted, "--function", "wrong_save")["disagreements"]
             if d["source"] == "cfi"]
    assert len(saves) == 6
    for d in saves:
        assert [(i["item"], i["table"]) for i in d["items"]] == [("rbx", "[CFA-24]")]


def test_realigned_drap_frame_is_followed(twin):
    """CFA = *(rbp-8) after `and $-32,%rsp`: judged right, not unknown."""
    report = validate(twin, "--function", "realigned")
    lines = report["functions_detail"][0]["instructions"]
    verdicts = [line["sources"]["cfi"]["verdict"] for line in lines]
    assert verdicts.count("right") >= 10 and "wrong" not in verdicts


def _section(path, name):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        section = ELFFile(handle).get_section_by_name(name)
        return section["sh_addr"], section["sh_size"]


def test_ld_2_40_ibt_plt_sframe_rows_are_wrong_where_the_code_says(tmp_path):
    """ld 2.40 describes IBT PLTs with the non-IBT layout in SFrame.

    Its .plt.sec's first stub gets PLT0's rows (rsp+16, where a stub entered
    by a call has rsp+8, as the CFI says), and in each lazy .plt entry
    (endbr64; push; jmp PLT0) the jmp after the push is still rsp+8. The
    CFI (`(rip & 15) >= 9`) is right everywhere.
    """
    binary = build("validate_plt.c", ["-O2", "-fcf-protection", "-Wl,-z,ibtplt", "-Wa,--gsframe"])
    report = validate(binary)
    assert wrong(report, "cfi") == []
    sec, _ = _section(binary, ".plt.sec")
    plt, plt_size = _section(binary, ".plt")
    lazy_jumps = [plt + 16 * n + 9 for n in range(1, plt_size // 16)]
    assert wrong(report, "sframe") == sorted(lazy_jumps + [sec, sec + 4])
    for d in report["disagreements"]:
        assert [i["item"] for i in d["items"]] == ["cfa"]


def test_plt_got_sframe_row_of_ld_2_46_is_wrong():
    """The corpus demo's .plt.got entry: SFrame says rsp+16, the code (and the CFI) rsp+8."""
    report = validate(oracle_dir() / "sframe-v3-demo" / "sframe_demo_x86_64")
    assert wrong(report, "cfi") == []
    [d] = report["disagreements"]
    assert (d["source"], d["address"], d["instruction"]) == ("sframe", 0x1080, "jmp qword ptr [rip + 0x2f5a]")
    assert (d["items"][0]["table"], d["items"][0]["analysis"]) == ("rsp+16", "rsp+8")


A64 = "aarch64-linux-gnu-"


def _build_aarch64(tmp_path, name, defines):
    source = ROOT / "tests" / "fixtures" / "validate_planted_aarch64.S"
    text = subprocess.run([need_tool("cpp"), "-P", *defines, str(source)], capture_output=True,
                          text=True, check=True).stdout
    (tmp_path / (name + ".s")).write_text(text)
    subprocess.run([need_tool(A64 + "as"), "--gsframe", "-o", str(tmp_path / (name + ".o")),
                    str(tmp_path / (name + ".s"))], check=True, capture_output=True)
    out = tmp_path / (name + ".so")
    subprocess.run([need_tool(A64 + "ld"), "-shared", "-o", str(out), str(tmp_path / (name + ".o"))],
                   check=True, capture_output=True)
    return out


def test_aarch64_planted_errors_and_twin(tmp_path):
    """stp/ldp with writeback, mov x29, sp, str of x19: the same four mistakes on aarch64."""
    planted = _build_aarch64(tmp_path, "planted", [])
    report = validate(planted)
    assert report["arch"] == "aarch64" and report["unknown"] == 0
    assert wrong(report, "cfi") == planted_ranges(planted, (1, 2, 3, 4), A64)
    assert wrong(report, "sframe") == planted_ranges(planted, (1, 2, 4), A64)
    twin = validate(_build_aarch64(tmp_path, "twin", ["-DCORRECT"]))
    assert twin["disagreements"] == [] and twin["sources"]["cfi"]["right"] == twin["instructions"]


def test_ld_2_40_writes_no_sframe_row_for_plt_got():
    """The .plt.got disagreement (SFrame rsp+16 where rsp+8 is right) comes from newer ld (the corpus'
    2.46): ld 2.40, this machine's, writes no SFrame row there, so there is nothing wrong to find."""
    binary = build("validate_plt.c", ["-O2", "-Wa,--gsframe"])
    got, size = _section(binary, ".plt.got")
    report = validate(binary, "--address", hex(got))
    assert report["disagreements"] == [] and size > 0
    [function] = report["functions_detail"]
    lines = function["instructions"]
    assert lines and all("sframe" not in line["sources"] and line["sources"]["cfi"]["verdict"] == "right"
                         for line in lines)
