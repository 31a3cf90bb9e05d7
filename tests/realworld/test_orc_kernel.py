"""The ORC tables of Debian's own kernels, unpacked by tests/setup_kernel.sh
into /opt/unwind-kernel: 6.1 (layout v4.14-v6.2, no .orc_header, chosen by the
version string) and 6.12 (layout v6.4+, chosen by .orc_header).

Oracles the project did not write: readelf (section sizes: the entry count),
the kernel's own objtool from the same build's linux-kbuild package
(`objtool --dump=orc`: every entry, field by field) and capstone (the
instructions: each row change falls on an instruction boundary after the
instruction that moved the stack, and the rules, applied to a stack built by
executing each sampled function's prologue, give back the planted return
address, stack pointer and bp at every instruction).
"""
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from plugin.formats import orc
from plugin.formats.orc import Layout, LayoutFoundBy, OrcReg, OrcType
from plugin.formats.orc_rules import Frame, Outcome, apply
from plugin.file_targets.orc import OrcImage

ROOT = Path(os.environ.get("UNWIND_KERNEL_ROOT", "/opt/unwind-kernel"))
KERNELS = {
    "6.1.0-50-amd64": ("linux-kbuild-6.1", Layout.V1, LayoutFoundBy.KERNEL_VERSION, 383971),
    "6.12.107+deb12-amd64": ("linux-kbuild-6.12.107+deb12", Layout.V3, LayoutFoundBy.HEADER, 439254),
}
REPO = Path(__file__).resolve().parents[2]


class Kernel:
    def __init__(self, name):
        self.name = name
        self.dir = ROOT / name
        self.vmlinux = self.dir / "vmlinux"
        if not self.vmlinux.is_file():
            pytest.fail("%s is missing: run `bash tests/setup.sh` (tests/setup_kernel.sh)" % self.vmlinux)
        self.data = self.vmlinux.read_bytes()
        self.elf = ELFFile(io.BytesIO(self.data))
        self.image = OrcImage(self.elf, self.data)
        self.kbuild, self.layout, self.found_by, self.count = KERNELS[name]
        self.objtool = self.dir / "deb/usr/lib" / self.kbuild / "tools/objtool/objtool"


_cache = {}


@pytest.fixture(params=sorted(KERNELS), scope="module")
def kernel(request):
    if request.param not in _cache:
        _cache[request.param] = Kernel(request.param)
    return _cache[request.param]


def test_count_and_layout(kernel):
    out = subprocess.run(["readelf", "-S", "-W", str(kernel.vmlinux)], capture_output=True, text=True,
                         check=True).stdout
    sizes = {m.group(1): int(m.group(2), 16) for m in
             re.finditer(r"\] (\.orc_unwind(?:_ip)?)\s+PROGBITS\s+\S+\s+\S+\s+(\S+)", out)}
    assert sizes[".orc_unwind_ip"] // 4 == sizes[".orc_unwind"] // 6 == kernel.image.count == kernel.count
    assert (kernel.image.layout, kernel.image.found_by) == (kernel.layout, kernel.found_by)
    assert orc.layout_from_flags(orc.all_flags(kernel.image.entry_bytes)) is kernel.layout
    assert kernel.image.notes == []


def test_fields_in_range(kernel):
    text = [(s["sh_addr"], s["sh_addr"] + s["sh_size"]) for s in kernel.elf.iter_sections()
            if s["sh_flags"] & 4 and s["sh_size"]]
    previous = 0
    types = set()
    low_cfa = []
    for entry in kernel.image.entries():
        assert entry.ip >= previous, "ips out of order at entry %d" % entry.index
        previous = entry.ip
        assert any(lo <= entry.ip <= hi for lo, hi in text), "entry %d: 0x%x in no code section" % (
            entry.index, entry.ip)
        assert entry.known_type and entry.flags >> 12 == 0
        assert entry.sp_reg in set(OrcReg) and entry.bp_reg in (OrcReg.UNDEFINED, OrcReg.PREV_SP, OrcReg.BP)
        if entry.type in (OrcType.CALL, OrcType.REGS, OrcType.REGS_PARTIAL):
            assert entry.sp_reg != OrcReg.UNDEFINED
            if entry.type is OrcType.CALL and entry.sp_reg in (OrcReg.SP, OrcReg.BP) and entry.sp_offset < 8:
                low_cfa.append(entry)   # the CFA below the return address: only hand-written hints
            assert entry.type is OrcType.CALL or entry.sp_reg in (OrcReg.SP, OrcReg.DX, OrcReg.DI)
        types.add(entry.type)
    assert types == set(OrcType)
    assert len(low_cfa) <= 2, low_cfa     # 6.12: one, in the ftrace trampoline (sp+0)


_OBJTOOL_REG = {"prevsp": OrcReg.PREV_SP, "dx": OrcReg.DX, "di": OrcReg.DI, "bp": OrcReg.BP, "sp": OrcReg.SP,
                "r10": OrcReg.R10, "r13": OrcReg.R13}
_TYPES = {Layout.V1: {"call": 0, "regs": 1, "regs (partial)": 2},
          Layout.V3: {"(und)": 0, "end": 1, "call": 2, "regs": 3, "regs (partial)": 4}}
_LINE_61 = re.compile(r"([0-9a-f]+): sp:(\S+) bp:(\S+) type:(.*) end:(\d)$")
_LINE_612 = re.compile(r"([0-9a-f]+):type:(.*) sp:(\S+) bp:(\S+) signal:(\d)$")


def _objtool_reg(text):
    """objtool's print_reg notation -> (reg, offset or None)."""
    if text == "(und)":
        return OrcReg.UNDEFINED, None
    m = re.fullmatch(r"\(sp\)([+-]\d+)", text)
    if m:
        return OrcReg.SP_INDIRECT, int(m.group(1))
    m = re.fullmatch(r"\(bp([+-]\d+)\)", text)
    if m:
        return OrcReg.BP_INDIRECT, int(m.group(1))
    m = re.fullmatch(r"([a-z0-9]+)([+-]\d+)", text)
    return _OBJTOOL_REG[m.group(1)], int(m.group(2))


def test_every_entry_matches_objtool(kernel, tmp_path):
    # objtool dumps only a file with a symbol table; the extracted vmlinux has none, so one symbol is added.
    copy = tmp_path / "vmlinux.sym"
    subprocess.run(["objcopy", "--add-symbol", "unwind_test_anchor=.text:0,global,function",
                    str(kernel.vmlinux), str(copy)], check=True)
    dump = subprocess.run([str(kernel.objtool), "--dump=orc", str(copy)], capture_output=True, text=True,
                          env=dict(os.environ, SRCARCH="x86"), timeout=600)
    lines = dump.stdout.splitlines()
    assert dump.returncode == 0 and len(lines) == kernel.count, dump.stderr[:500]
    types = _TYPES[kernel.layout]
    for entry, line in zip(kernel.image.entries(), lines):
        if kernel.layout is Layout.V1:
            m = _LINE_61.match(line)
            ip, sp, bp, kind, bit = m.groups()
            flag = entry.end
        else:
            m = _LINE_612.match(line)
            ip, kind, sp, bp, bit = m.groups()
            flag = entry.signal
        sp_reg, sp_offset = _objtool_reg(sp)
        bp_reg, bp_offset = _objtool_reg(bp)
        got = (entry.ip, entry.sp_reg, entry.bp_reg, entry.raw_type, flag)
        assert got == (int(ip, 16), sp_reg, bp_reg, types[kind], bit == "1"), line
        assert sp_offset is None or sp_offset == entry.sp_offset, line
        assert bp_offset is None or bp_offset == entry.bp_offset, line


def _executable_bytes(kernel):
    return [(s["sh_addr"], s.data()) for s in kernel.elf.iter_sections()
            if s["sh_flags"] & 4 and s["sh_type"] == "SHT_PROGBITS"]


def _code_at(code, address, size):
    for base, blob in code:
        if base <= address and address + size <= base + len(blob):
            return blob[address - base:address - base + size]
    return None


_STOPS = ("ret", "jmp", "call", "int3", "ud2", "leave", "enter", "iretq", "sysret")


def _stack_delta(insn):
    """How many bytes the instruction pushes (+) or pops (-); None when it writes rsp otherwise."""
    ops = insn.op_str
    if insn.mnemonic in ("push", "pushfq"):
        return 8
    if insn.mnemonic in ("pop", "popfq"):
        return None if ops == "rsp" else -8
    m = re.fullmatch(r"(sub|add) rsp, (0x[0-9a-f]+|\d+)", insn.mnemonic + " " + ops)
    if m:
        return int(m.group(2), 0) * (1 if m.group(1) == "sub" else -1)
    if ops.startswith("rsp,") or ops == "rsp" or insn.mnemonic.startswith(_STOPS) or insn.mnemonic[0] == "j":
        return None
    return 0


def test_row_changes_follow_the_instructions(kernel):
    """Where two adjacent SP-based CALL rows differ in their CFA offset, the range
    between them is straight-line code whose last instruction ends exactly at the
    second row and moves the stack by the difference; no other instruction moves it."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs
    md = Cs(CS_ARCH_X86, CS_MODE_64)
    code = _executable_bytes(kernel)
    entries = list(kernel.image.entries())
    checked = patched = bp_saves = 0
    hinted = []
    for cur, nxt in zip(entries, entries[1:]):
        if not (cur.type is nxt.type is OrcType.CALL and cur.sp_reg == nxt.sp_reg == OrcReg.SP):
            continue
        if cur.sp_offset == nxt.sp_offset or not 0 < nxt.ip - cur.ip <= 64:
            continue
        blob = _code_at(code, cur.ip, nxt.ip - cur.ip)
        insns = list(md.disasm(bytes(blob), cur.ip))
        deltas = [_stack_delta(i) for i in insns]
        if None in deltas:
            continue        # a block ends in the range (the next row is another path's) or rsp is set
        if not insns or insns[-1].address + insns[-1].size != nxt.ip or any(
                i.mnemonic == "nop" for i in insns):
            # Not instruction boundaries on disk, or nops: an alternative or
            # paravirt site, whose rows describe the instructions patched in at boot
            # (e.g. `pushfq; pop %rax` for `call *pv_ops`). Counted, and bounded below (0.4% in
            # 6.1, 2.3% in 6.12). The few that differ are hand-written entry code whose rows
            # come from UNWIND_HINTs (the ftrace trampoline: 2 in each kernel).
            patched += 1
            continue
        if deltas[-1] != nxt.sp_offset - cur.sp_offset or any(deltas[:-1]):
            hinted.append("0x%x %s %s: cfa sp%+d -> sp%+d" % (insns[-1].address, insns[-1].mnemonic,
                                                           insns[-1].op_str, cur.sp_offset, nxt.sp_offset))
            continue
        if insns[-1].mnemonic == "push" and insns[-1].op_str == "rbp" and cur.bp_reg == OrcReg.UNDEFINED:
            assert (nxt.bp_reg, nxt.bp_offset) == (OrcReg.PREV_SP, -nxt.sp_offset), hex(nxt.ip)
            bp_saves += 1
        checked += 1
    print("%s: %d row changes agree with the instructions, %d at patched sites, %d differ:\n  %s"
          % (kernel.name, checked, patched, len(hinted), "\n  ".join(hinted)))
    assert checked > 20000 and bp_saves > 1000 and patched < checked // 20 and len(hinted) < 10


RET, BP0, TOP = 0xffffffff81abcdef, 0xffffc90000badbad, 0xffffc90000004000


def test_rules_walk_sampled_prologues(kernel):
    """Each sampled function (a row `cfa=sp+8` after a row of another state) run
    instruction by instruction over a stack holding RET at TOP: at every
    instruction the entry in force gives back RET, TOP + 8 and the caller's bp."""
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs
    md = Cs(CS_ARCH_X86, CS_MODE_64)
    code = _executable_bytes(kernel)
    table = kernel.image.table()
    entries = list(kernel.image.entries())
    starts = [e for p, e in zip(entries, entries[1:]) if e.type is OrcType.CALL and e.sp_reg == OrcReg.SP
              and e.sp_offset == 8 and e.bp_reg == OrcReg.UNDEFINED and (p.sp_offset, p.sp_reg) != (8, OrcReg.SP)]
    sample = starts[::max(1, len(starts) // 3000)]
    steps = bp_saved = 0
    for start in sample:
        blob = _code_at(code, start.ip, 96)
        if blob is None:
            continue
        memory = {TOP: RET}
        regs = {"rsp": TOP, "rbp": BP0}
        only_nops = True
        for insn in md.disasm(bytes(blob), start.ip):
            step = apply(table.lookup(insn.address), Frame(insn.address, regs["rsp"], regs["rbp"]),
                         lambda a: memory.get(a))
            assert step.outcome is Outcome.CALLER, (hex(insn.address), step.reason)
            assert (step.caller.pc, step.caller.sp, step.caller.bp) == (RET, TOP + 8, BP0), hex(insn.address)
            steps += 1
            # `call __fentry__` (after the padding nops and endbr64) returns with the stack as it was
            delta = 0 if insn.mnemonic == "call" and only_nops else _stack_delta(insn)
            only_nops = only_nops and insn.mnemonic in ("nop", "endbr64")
            if delta is None:
                break
            if insn.mnemonic == "push":
                regs["rsp"] -= 8
                memory[regs["rsp"]] = regs.get(insn.op_str, 0x5a5a5a5a)
                bp_saved += insn.op_str == "rbp"
            elif insn.mnemonic == "pop":
                regs[insn.op_str] = memory.get(regs["rsp"], 0)
                regs["rsp"] += 8
            else:
                regs["rsp"] -= delta
            if insn.op_str == "rbp, rsp" and insn.mnemonic == "mov":
                regs["rbp"] = regs["rsp"]
            elif insn.op_str.startswith("rbp,") or insn.op_str.startswith("ebp,"):
                break       # rbp written other than from rsp: the simulation stops here
    assert len(sample) > 2500 and steps > 10000 and bp_saved > 300
    print("%s: %d functions, %d instructions, %d bp saves" % (kernel.name, len(sample), steps, bp_saved))


def test_tables_command(kernel):
    entry = kernel.image.table().lookup(0xffffffff81000100)
    out = subprocess.run([sys.executable, "-m", "plugin", "tables", str(kernel.vmlinux), "--address",
                          "0xffffffff81000100"], capture_output=True, text=True, cwd=str(REPO), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ORC layout %s (by %s)" % (kernel.layout.value, kernel.found_by.value) in out.stdout
    assert "[0x%x, " % entry.ip in out.stdout and orc.entry_text(entry) in out.stdout
