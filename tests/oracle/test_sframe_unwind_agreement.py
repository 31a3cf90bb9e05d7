"""SFrame rows against the CFI rows of the same functions, at every address.

Two producers wrote these tables independently from the same assembly:
GNU as's --gsframe (SFrame v1 here, binutils 2.40; v3 in the corpus demo,
2.46) and the compiler's .cfi directives (.eh_frame). Where both cover an
address, they must say the same about the CFA, the frame pointer and the
return address. plugin.validate.agreement decides "the same" by evaluating both
rows, so this also checks the SFrame -> Row translation and the CFI
interpreter against each other on real code.

Then a planted disagreement: one FRE data word patched in a copy of the
demo, and `python -m plugin tables --address ... --json` must say so.
"""

import json
import shutil
import subprocess
import sys

import pytest

from plugin.file_targets.elf import FileTarget
from plugin.modules import ModuleMap
from plugin.validate.agreement import compare
from plugin.strategies.cfi import CfiTables
from plugin.strategies.sframe import SFrameTables
from support import ROOT, build, oracle_dir

FLAGS = {
    "O0": ["-O0", "-Wa,--gsframe"],
    "O2": ["-O2", "-Wa,--gsframe"],
    "O2-nofp": ["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"],
}
DEMO = "sframe-v3-demo"


def every_address(path):
    """(version, [(address, agreement)]) for each address both CFI and SFrame cover."""
    target = FileTarget(str(path))
    module = ModuleMap(target).all()[0]
    sframe, cfi = SFrameTables.of(module, target), CfiTables.of(module, target)
    section = sframe.section()
    assert section is not None, sframe.problems
    out = []
    for fde in section.fdes:
        for address in range(fde.start, fde.end):
            theirs, ours = sframe.row_for(address), cfi.row_for(address)
            if theirs is None or ours is None:
                continue
            out.append((address, compare(ours[4], theirs[3], module.arch, address)))
    return section, out


def _disagreements(results):
    return [(address, a) for address, a in results
            if not a["agree"] or any(a[k]["agree"] is None for k in ("cfa", "fp", "ra"))]


@pytest.mark.parametrize("flags", sorted(FLAGS))
def test_gas_v1_sframe_agrees_with_cfi_everywhere(flags):
    binary = build("chain.c", FLAGS[flags])
    section, results = every_address(binary)
    assert section.version == 1
    assert len(results) > 500
    covered = {fde.start for fde in section.fdes
               if any(fde.start <= address < fde.end for address, _ in results)}
    assert len(covered) >= 12, "too few functions compared"
    assert _disagreements(results) == []


def test_demo_aarch64_sframe_agrees_with_cfi_everywhere():
    section, results = every_address(oracle_dir() / DEMO / "sframe_demo_aarch64")
    assert section.version == 3 and len(results) > 300
    assert len({fde.start for fde in section.fdes}) == 5
    assert _disagreements(results) == []


def test_demo_x86_64_agrees_except_the_plt_got_entry():
    """Everything agrees but __cxa_finalize@plt in .plt.got (0x1080, 8 bytes).

    There ld 2.46 wrote SFrame `sp+16` (as for a .plt entry after its push),
    but a .plt.got entry is a bare `jmp *GOT(%rip)` reached by a call, so
    the CFA is rsp+8 as the CFI says. The comparison finds a real producer
    mistake; only the CFA item differs, FP and RA rules agree.
    """
    section, results = every_address(oracle_dir() / DEMO / "sframe_demo_x86_64")
    assert section.version == 3 and len(results) > 400
    bad = _disagreements(results)
    assert [address for address, _ in bad] == list(range(0x1080, 0x1088))
    for _, agreement in bad:
        assert (agreement["cfa"]["agree"], agreement["fp"]["agree"], agreement["ra"]["agree"]) == \
            (False, True, True)
        assert (agreement["cfa"]["cfi"], agreement["cfa"]["sframe"]) == ("rsp+8", "rsp+16")
    # The DRAP function is among those that agree: CFA = *(rbp-16) both ways.
    drap = dict(results)[0x1230]
    assert drap["agree"] and drap["cfa"]["sframe"] == "*(rbp-16)"


def _tables(path, address, as_json=True):
    cmd = [sys.executable, "-m", "plugin", "tables", str(path), "--address", hex(address)]
    out = subprocess.run(cmd + (["--json"] if as_json else []), cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if as_json else out.stdout


def _first_word_offset(path, fde_index, fre_index):
    """File offset of the first data word of an FRE of the demo's .sframe."""
    target = FileTarget(str(path))
    module = ModuleMap(target).all()[0]
    section = SFrameTables.of(module, target).section()
    fde = section.fdes[fde_index]
    fre = section.fres(fde)[fre_index]
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        file_offset = ELFFile(handle).get_section_by_name(".sframe")["sh_offset"]
    return file_offset + fre.offset + fde.fre_type + 1, fre


def test_tables_report_agreement_and_a_planted_disagreement(tmp_path):
    demo = tmp_path / "demo"
    shutil.copy(oracle_dir() / DEMO / "sframe_demo_x86_64", demo)
    demo.chmod(0o644)
    address = 0x12b0                           # recurse, after `sub $8, %rsp`: CFA = rsp+16
    clean = _tables(demo, address)
    kinds = [s["kind"] for s in clean["sources"]]
    assert kinds == ["cfi", "sframe"]
    sframe_source = clean["sources"][1]
    assert sframe_source["version"] == 3 and sframe_source["found_by"] == "PT_GNU_SFRAME"
    (entry,) = sframe_source["entries"]
    assert (entry["fde_index"], entry["start"], entry["end"]) == (7, 0x12a0, 0x12da)
    (fre,) = entry["fres"]
    assert fre["fre_index"] == 1 and fre["fre_start"] == 0x12a8 and fre["rules"]["cfa"] == "CFA = rsp+16"
    assert entry["rows"][0]["cfa"] == {"kind": "register", "register": "rsp", "offset": 16}
    assert clean["agreement"]["agree"] is True
    assert clean["agreement"]["cfi_row"]["row_text"] == "CFA=rsp+16 => rip=[CFA-8]"

    offset, fre = _first_word_offset(demo, 7, 1)
    assert fre.words[0] == 16
    data = bytearray(demo.read_bytes())
    assert data[offset] == 16
    data[offset] = 24                          # the FRE now claims CFA = rsp+24
    demo.write_bytes(bytes(data))
    planted = _tables(demo, address)
    agreement = planted["agreement"]
    assert agreement["agree"] is False
    assert agreement["cfa"]["agree"] is False
    assert (agreement["cfa"]["cfi"], agreement["cfa"]["sframe"]) == ("rsp+16", "rsp+24")
    assert agreement["fp"]["agree"] and agreement["ra"]["agree"]
    text = _tables(demo, address, as_json=False)
    assert "CFI and SFrame at 0x12b0: DISAGREE" in text
    assert "CFA DIFFER" in text


def test_tables_without_address_list_every_sframe_entry():
    out = subprocess.run([sys.executable, "-m", "plugin", "tables",
                          str(oracle_dir() / DEMO / "sframe_demo_x86_64"), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout)
    (sframe,) = [s for s in result["sources"] if s["kind"] == "sframe"]
    assert len(sframe["entries"]) == 8
    assert sum(len(e["rows"]) for e in sframe["entries"]) == 23
    assert all(len(e["rows"]) == len(e["fres"]) == len(e["rows_text"]) for e in sframe["entries"])
    flex = sframe["entries"][6]
    assert flex["fde_type"] == "flex"
    assert [f["rules"]["cfa"] for f in flex["fres"]] == [
        "CFA = rsp+8", "CFA = r10+0", "CFA = r10+0", "CFA = *(rbp-16)", "CFA = r10+0", "CFA = rsp+8"]
    assert sframe["entries"][1]["pc_type"] == "mask" and sframe["entries"][1]["rep_size"] == 16
    assert "agreement" not in result
