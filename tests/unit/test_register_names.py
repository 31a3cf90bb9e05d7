"""x86_64 DWARF registers 17-32 are xmm0-xmm15 in rows, as llvm-dwarfdump names them."""
from __future__ import annotations

import re
import subprocess
import sys

from plugin.arch import x86_64

_ASM = """.text
.globl f
f:
.cfi_startproc
sub $24,%rsp
.cfi_adjust_cfa_offset 24
movdqu %xmm6,(%rsp)
.cfi_offset %xmm6, -32
movdqu %xmm15,16(%rsp)
.cfi_offset %xmm15, -16
add $24,%rsp
.cfi_adjust_cfa_offset -24
ret
.cfi_endproc
"""


def test_names_and_numbers():
    arch = x86_64.ARCH
    assert [arch.name_of(n) for n in (17, 23, 32)] == ["xmm0", "xmm6", "xmm15"]
    assert arch.number_of("%xmm6") == 23
    assert 23 not in arch.registers          # named only: never read as an integer register


def test_rows_match_llvm(tmp_path):
    (tmp_path / "x.s").write_text(_ASM)
    subprocess.run(["as", str(tmp_path / "x.s"), "-o", str(tmp_path / "x.o")], check=True)
    oracle = subprocess.run(["llvm-dwarfdump-16", "--eh-frame", str(tmp_path / "x.o")],
                            capture_output=True, text=True, check=True).stdout
    theirs = sorted(set(n.lower() for n in re.findall(r"\b(XMM\d+)=", oracle)))
    ours = subprocess.run([sys.executable, "-m", "plugin", "tables", str(tmp_path / "x.o")],
                          capture_output=True, text=True, timeout=120).stdout
    assert theirs == ["xmm15", "xmm6"]
    assert sorted(set(re.findall(r"\b(xmm\d+)=", ours))) == theirs
    assert not re.search(r"\br(2[3-9]|3[0-2])=", ours)
