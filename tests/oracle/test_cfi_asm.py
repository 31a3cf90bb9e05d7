"""Self-tests of the CFI assembler in tests/helpers/cfi_builder.py."""

from cfi_builder import X86_RIP, X86_RSP, Builder

from plugin.leb128 import encode_sleb as sleb, encode_uleb as uleb
from plugin.memory import Region


# --- self-tests of the assembler ----------------------------------------------

def test_leb128_round_trip():
    from plugin.memory import Cursor
    for value in (0, 1, 63, 64, 127, 128, 255, 624485, 2 ** 63, 2 ** 64 + 5):
        assert Cursor(Region.from_bytes("t", 0, uleb(value))).uleb() == value
    for value in (0, 1, -1, 63, -64, 64, -65, -123456, 2 ** 62, -(2 ** 63)):
        assert Cursor(Region.from_bytes("t", 0, sleb(value))).sleb() == value


def test_builder_output_is_what_llvm_dwarfdump_reads(tmp_path):
    """The assembler's CIE/FDE bookkeeping as llvm-dwarfdump sees it."""
    import subprocess

    from support import need_tool
    objcopy = need_tool("objcopy")
    dwarfdump = need_tool("llvm-dwarfdump-16")
    b = Builder(address=0)
    cie = b.cie(bytes([0x0C, X86_RSP, 8, 0x80 | X86_RIP, 1]))
    b.fde(cie, 0x1000, 0x20, bytes([0x41, 0x0E, 16, 0x86, 2]))
    b.fde(cie, 0x1020, 0x10, bytes([0x02, 0x08, 0x0E, 24]), is_64=True)
    b.terminator()
    raw = tmp_path / "eh.bin"
    raw.write_bytes(bytes(b.data))
    elf = tmp_path / "eh.elf"
    subprocess.run([objcopy, "-I", "binary", "-O", "elf64-x86-64", "--rename-section",
                    ".data=.eh_frame,alloc,load,readonly,data,contents", str(raw), str(elf)],
                   check=True)
    out = subprocess.run([dwarfdump, "--eh-frame", str(elf)], capture_output=True,
                         text=True, check=True).stdout
    assert "pc=00001000...00001020" in out
    assert "0x1001: CFA=RSP+16: RBP=[CFA-16], RIP=[CFA-8]" in out
    assert "pc=00001020...00001030" in out and "Format:       DWARF64" in out
    assert "0x1028: CFA=RSP+24: RIP=[CFA-8]" in out
