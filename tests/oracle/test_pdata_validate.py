"""`python -m plugin validate` on PE files: the `pdata` rows judged against the instruction
analysis at every instruction (CFA, return address, saved non-volatile registers, rsi, rdi
and xmm6-xmm15 included on x64). clang-16's own output and the hand-written fixtures are clean;
planted wrong `.seh_stackalloc`, `.seh_savereg`, `.seh_savexmm` (x64) and `.seh_save_regp` (ARM64) are
found from exactly the instruction after the one they describe (llvm-objdump-16's
disassembly), and only in their function (their twins are clean)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pe_images import build, nm_symbols, readobj_x64

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
ARM64 = "aarch64-pc-windows-msvc"
X64 = "x86_64-pc-windows-msvc"
CLEAN = [("x64_funcs.c", X64, "-O0", False), ("x64_funcs.c", X64, "-O2", False), ("x64_funcs.c", X64, "-O2", True),
         ("x64_live.c", X64, "-O2", True), ("x64_xmm.c", X64, "-O2", False), ("x64_codes.s", X64, "-O0", False), ("x64_chained.s", X64, "-O0", False),
         ("x64_funcs.c", ARM64, "-O0", False), ("x64_funcs.c", ARM64, "-O2", True),
         ("arm64_codes.s", ARM64, "-O0", False), ("arm64_packed_forms.S", ARM64, "-O0", False)]


def _validate(path, *extra):
    run = subprocess.run([sys.executable, "-m", "plugin", "validate", "--json", path, *extra],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode in (0, 1), run.stderr
    return run.returncode, json.loads(run.stdout)["modules"][0]


def _after(path, function, mnemonic_and_operands):
    """The address of the instruction after the first one in `function` that matches."""
    out = subprocess.run(["llvm-objdump-16", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    start = nm_symbols(path)[function]
    lines = [(int(m.group(1), 16), re.sub(r"\s+", " ", m.group(2)).strip())
             for m in re.finditer(r"^\s*([0-9a-f]+):\s+(.*)$", out, re.M)]
    for n, (address, text) in enumerate(lines):
        if address >= start and text.startswith(mnemonic_and_operands):
            return lines[n + 1][0]
    raise AssertionError("%s not found in %s" % (mnemonic_and_operands, function))


@pytest.mark.parametrize("source,target,opt,dll", CLEAN)
def test_clang_and_the_fixtures_are_clean(tmp_path, source, target, opt, dll):
    path = build(source, str(tmp_path), target=target, opt=opt, dll=dll)
    status, report = _validate(path)
    summary = report["sources"]["pdata"]
    assert status == 0 and report["disagreements"] == [] and report["problems"] == []
    assert summary["wrong"] == 0 and summary["right"] >= 0.85 * summary["checked"] > 0


def _by_function(report, symbols):
    starts = sorted((address, name) for name, address in symbols.items())
    out = {}
    for d in report["disagreements"]:
        name = [n for a, n in starts if a <= d["address"]][-1]
        out.setdefault(name, []).append(d)
    return out


def test_planted_x64_directives_are_found_at_their_instructions(tmp_path):
    path = build("x64_planted.s", str(tmp_path), opt="-O0")
    status, report = _validate(path)
    found = _by_function(report, nm_symbols(path))
    assert status == 1 and set(found) == {"wrong_alloc", "wrong_savereg", "wrong_savexmm", "wrong_savexmm_far"}
    alloc = found["wrong_alloc"]
    assert [d["address"] for d in alloc] == [_after(path, "wrong_alloc", "subq $0x20, %rsp")]
    assert [i["item"] for i in alloc[0]["items"]] == ["cfa"]
    save = found["wrong_savereg"]
    assert save[0]["address"] == _after(path, "wrong_savereg", "movq %rsi, 0x10(%rsp)")
    assert all([i["item"] for i in d["items"]] == ["rsi"] for d in save)
    codes = {hex(fn["StartAddress"]): fn["infos"][0]["codes"] for fn in readobj_x64(path)}
    symbols = nm_symbols(path)
    for name, register, stored, said in (("wrong_savexmm", "xmm6", "movaps %xmm6, 0x20(%rsp)", 0x10),
                                         ("wrong_savexmm_far", "xmm7", "movaps %xmm7, 0x100010(%rsp)", 0x100020)):
        # llvm-readobj shows the planted offset; the code (llvm-objdump) stores elsewhere
        assert any(text.startswith("SAVE_XMM128") and "reg=%s, offset=0x%x" % (register.upper(), said) in text
                   for _, text in codes[hex(symbols[name])]), codes[hex(symbols[name])]
        xmm = found[name]
        assert xmm[0]["address"] == _after(path, name, stored)
        assert all([i["item"] for i in d["items"]] == [register] for d in xmm), xmm


def test_planted_arm64_save_regp_is_found_at_its_instruction(tmp_path):
    path = build("arm64_planted.s", str(tmp_path), target=ARM64, opt="-O0")
    status, report = _validate(path)
    found = _by_function(report, nm_symbols(path))
    assert status == 1 and set(found) == {"wrong_regp"}
    regp = found["wrong_regp"]
    assert regp[0]["address"] == _after(path, "wrong_regp", "stp x19, x20, [sp, #0x10]")
    assert {i["item"] for d in regp for i in d["items"]} == {"x19", "x20"}


def test_function_option_and_refusals(tmp_path):
    path = build("x64_planted.s", str(tmp_path), opt="-O0")
    status, report = _validate(path, "--function", "wrong_alloc")
    assert status == 1 and report["functions"] == 1
    run = subprocess.run([sys.executable, "-m", "plugin", "validate", path, "--function", "nothing"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "no function named 'nothing'" in run.stderr


def test_baseline_reports_only_new_disagreements(tmp_path):
    """An earlier --json run as the baseline: the same file is clean (exit 0, all known); a twin
    with one more planted directive reports only that one."""
    path = build("x64_planted.s", str(tmp_path), opt="-O0")
    status, report = _validate(path)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"modules": [report]}))
    status, again = _validate(path, "--baseline", str(old))
    assert status == 0 and again["disagreements"] == []
    source = open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "pe", "x64_planted.s")).read()
    more = tmp_path / "more.s"
    more.write_text(source.replace("  .seh_stackalloc 0x20\n  .seh_endprologue\n  mov %rcx, %rbx",
                                   "  .seh_stackalloc 0x28\n  .seh_endprologue\n  mov %rcx, %rbx", 1))
    (tmp_path / "twin").mkdir()
    obj, exe = str(tmp_path / "more.obj"), str(tmp_path / "twin" / os.path.basename(path))   # the same module name
    subprocess.run(["clang-16", "--target=" + X64, "-c", str(more), "-o", obj], check=True)
    subprocess.run(["lld-link-16", "/nodefaultlib", "/debug:symtab", "/entry:start", "/subsystem:console", obj,
                    "/out:" + exe], check=True)
    status, new = _validate(exe, "--baseline", str(old))
    assert status == 1 and {d["function"] for d in new["disagreements"]} == {"right_alloc"}


def test_clang_saved_xmm_registers_are_judged(tmp_path):
    """clang -O2 saves xmm6-xmm13 with movaps (SAVE_XMM128): in the body every row names each
    at the slot llvm-readobj's code gives (rsp after the allocation + offset), and the analysis
    agrees at every instruction (all right, none undecided)."""
    path = build("x64_xmm.c", str(tmp_path), opt="-O2")
    keep = [fn for fn in readobj_x64(path) if fn["StartAddress"] == nm_symbols(path)["keep"]][0]
    codes = keep["infos"][0]["codes"]
    alloc = [int(re.search(r"size=(\d+)", t).group(1)) for _, t in codes if t.startswith("ALLOC_")]
    saved = {m.group(1).lower(): int(m.group(2), 16) for m in
             (re.search(r"reg=(XMM\d+), offset=0x([0-9A-Fa-f]+)", t) for _, t in codes) if m}
    assert len(saved) >= 4 and len(alloc) == 1, codes
    status, report = _validate(path, "--function", "keep")
    lines = report["functions_detail"][0]["instructions"]
    assert status == 0 and all(line["sources"]["pdata"]["verdict"] == "right" for line in lines)
    frame = alloc[0] + 8                     # CFA - rsp after the allocation
    body = [line for line in lines if all("%s=" % r in line["sources"]["pdata"]["row"] for r in saved)]
    assert body, lines
    for register, offset in saved.items():
        assert all("%s=[CFA%+d]" % (register, offset - frame) in line["sources"]["pdata"]["row"] for line in body)
        assert all("[CFA%+d]" % (offset - frame) in line["analysis"].split("%s=" % register)[1].split()[0]
                   for line in body)


def test_stack_probe_allocation_is_exact(tmp_path):
    """pe_big's 5000-byte frame: `mov eax, N; call __chkstk; sub rsp, rax`. With the image's symbol
    table naming __chkstk, its contract (every register but r10, r11 kept) makes `sub rsp, rax` an
    exact allocation of N: no instruction undecided, the CFA after it rsp + N + 8 with N the
    ALLOC_LARGE size llvm-readobj prints, and the detail says why. Linked without the symbol
    table, the callee's code (x64_live.c's one-`ret` stub) proves the same contract."""
    path = build("x64_live.c", str(tmp_path), dll=True)
    symbols = nm_symbols(path)
    big = [fn for fn in readobj_x64(path) if fn["StartAddress"] == symbols["pe_big"]][0]
    size = [int(re.search(r"size=(\d+)", t).group(1)) for _, t in big["infos"][0]["codes"] if t.startswith("ALLOC_")]
    assert size and size[0] > 4096
    call = _after(path, "pe_big", "movl $0x%x, %%eax" % size[0])
    after = _after(path, "pe_big", "subq %rax, %rsp")
    bare = str(tmp_path / "bare.dll")          # the same object linked without /debug:symtab
    obj = os.path.splitext(path)[0] + ".obj"
    subprocess.run(["lld-link-16", "/nodefaultlib", "/dll", "/noentry", obj, "/out:" + bare], check=True)
    for image, evidence in ((path, "__chkstk (the module's own symbol)"), (bare, "(its code, analysed)")):
        status, report = _validate(image, "--address", str(symbols["pe_big"]))
        detail = report["functions_detail"][0]
        assert status == 0 and report["unknown"] == 0 and report["sources"]["pdata"]["unknown"] == 0, report
        line = [i for i in detail["instructions"] if i["address"] == after][0]
        assert line["analysis"].startswith("CFA=rsp+%d " % (size[0] + 8)), line
        assert evidence in detail["notes"]["0x%x" % call] and "r10 and r11" in detail["notes"]["0x%x" % call]
    status, report = _validate(bare)
    assert status == 0 and report["unknown"] == 0 and report["sources"]["pdata"]["unknown"] == 0


def test_unnamed_probes_are_proven_by_their_code(tmp_path):
    """x64_probes.s: unnamed probes with MSVC's __chkstk body and compiler-rt's ___chkstk_ms body
    are proven to keep every register but r10 and r11 (and rsp): their callers' 0x3008-byte
    allocations (llvm-readobj's ALLOC_LARGE) are exact, nothing undecided. A "probe" that changes
    rax or rbx proves nothing: its caller's allocation stays undecided (never wrong)."""
    path = build("x64_probes.s", str(tmp_path), opt="-O0")
    symbols = nm_symbols(path)
    allocs = {fn["StartAddress"]: [t for _, t in fn["infos"][0]["codes"] if t.startswith("ALLOC_LARGE")]
              for fn in readobj_x64(path)}
    for name, proven in (("msvc_style", True), ("ms_style", True), ("clobbers_rax", False), ("clobbers_rbx", False)):
        assert allocs[symbols[name]] == ["ALLOC_LARGE size=12296"], allocs
        status, report = _validate(path, "--function", name)
        detail = report["functions_detail"][0]
        summary = report["sources"]["pdata"]
        assert status == 0 and summary["wrong"] == 0
        after = [i for i in detail["instructions"] if i["address"] == _after(path, name, "subq %rax, %rsp")][0]
        if proven:
            assert summary["unknown"] == 0 and summary["right"] == summary["checked"] > 5, (name, summary)
            assert after["analysis"].startswith("CFA=rsp+%d " % (0x3008 + 8 + (8 if name == "ms_style" else 0)))
            [note] = detail["notes"].values()
            assert "(its code, analysed)" in note
        else:
            assert summary["unknown"] >= 3 and detail["notes"] == {}, (name, summary)
            assert after["analysis"].startswith("CFA=unknown"), after
