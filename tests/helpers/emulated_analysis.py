"""The instruction analysis checked against execution: a freestanding ELF run in Unicorn.

The program (tests/fixtures/analysis_run.c, built `-nostdlib -static -e run`)
is loaded by its program headers and `run(argument)` is called with a
sentinel return address and distinct values in the callee-saved registers.
A shadow stack of frames follows the execution: at a function's first
instruction (its ELF symbol) a frame begins, with the real CFA (the stack
pointer before the call pushed the return address: on i386 esp+4, on Arm
sp itself) and the caller's register values and return address; it ends
when execution reaches that return address with the stack pointer back at
or above the CFA. Thumb functions (odd symbol values) run and are analysed
as Thumb.
At every executed instruction the analysis's row for the innermost frame's
function is evaluated on the real registers and memory: its CFA must be the
real one, a register saved at CFA+k must be the caller's value there, a
register said unchanged must hold the caller's value.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import unicorn
from elftools.elf.elffile import ELFFile
from unicorn import arm_const, x86_const

from plugin.analysis import CodeAnalysis, unwind_row
from plugin.arch import BY_NAME
from plugin.model.rules import RuleKind

SENTINEL = 0x00F0_0000                 # the return address run() returns to: mapped, never executed
STACK_TOP = 0x0080_0000
STACK_SIZE = 0x10_0000
MACHINES = {                           # arch -> (Unicorn arch, mode, DWARF number -> Unicorn register)
    "i386": (unicorn.UC_ARCH_X86, unicorn.UC_MODE_32,
             {0: x86_const.UC_X86_REG_EAX, 1: x86_const.UC_X86_REG_ECX, 2: x86_const.UC_X86_REG_EDX,
              3: x86_const.UC_X86_REG_EBX, 4: x86_const.UC_X86_REG_ESP, 5: x86_const.UC_X86_REG_EBP,
              6: x86_const.UC_X86_REG_ESI, 7: x86_const.UC_X86_REG_EDI, 8: x86_const.UC_X86_REG_EIP}),
    "arm": (unicorn.UC_ARCH_ARM, unicorn.UC_MODE_ARM,
            dict(enumerate([getattr(arm_const, "UC_ARM_REG_R%d" % n) for n in range(13)]
                           + [arm_const.UC_ARM_REG_SP, arm_const.UC_ARM_REG_LR, arm_const.UC_ARM_REG_PC]))),
}


@dataclass
class Frame:
    start: int
    end: int
    name: str
    cfa: int
    caller: Dict[int, int]                 # DWARF number -> the caller's value (the return address for ra)
    ra: int                                # where it returns to (Thumb bit cleared)


@dataclass
class Report:
    checked: int = 0
    wrong: List[str] = field(default_factory=list)
    undecided: List[Tuple[int, str]] = field(default_factory=list)
    outside: int = 0                       # instructions outside the innermost frame's function (.cold parts)
    functions: set = field(default_factory=set)
    rules: set = field(default_factory=set)   # (function, row text) seen: what was exercised


def functions_of(path):
    """[(start, end, name, thumb)] of the ELF's sized function symbols (Arm: bit 0 of a value means Thumb)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        arm = elf["e_machine"] == "EM_ARM"
        out = set()
        for s in elf.get_section_by_name(".symtab").iter_symbols():
            if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]:
                thumb = arm and bool(s["st_value"] & 1)
                start = s["st_value"] & ~1 if arm else s["st_value"]
                out.add((start, start + s["st_size"], s.name, thumb))
        return sorted(out)


def file_reader(path):
    """read(address, size) of the ELF's loaded bytes, from the file."""
    data = path.read_bytes()
    with open(path, "rb") as f:
        segments = [(s["p_vaddr"], s["p_offset"], s["p_filesz"]) for s in ELFFile(f).iter_segments()
                    if s["p_type"] == "PT_LOAD"]

    def read(address, size):
        for vaddr, offset, filesz in segments:
            if vaddr <= address and address + size <= vaddr + filesz:
                return data[offset + address - vaddr:offset + address - vaddr + size]
        raise ValueError("0x%x is not in the file" % address)
    return read


def _load(uc, path):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for segment in elf.iter_segments():
            if segment["p_type"] != "PT_LOAD":
                continue
            low = segment["p_vaddr"] & ~0xFFF
            high = (segment["p_vaddr"] + segment["p_memsz"] + 0xFFF) & ~0xFFF
            uc.mem_map(low, high - low)
            uc.mem_write(segment["p_vaddr"], segment.data())


def run_checked(path, arch_name, argument) -> Report:
    arch = BY_NAME[arch_name]
    uc_arch, uc_mode, regs = MACHINES[arch_name]
    uc = unicorn.Uc(uc_arch, uc_mode)
    if arch_name == "arm":                   # VFP on: coprocessors 10 and 11 accessible, FPEXC.EN
        uc.reg_write(arm_const.UC_ARM_REG_C1_C0_2, uc.reg_read(arm_const.UC_ARM_REG_C1_C0_2) | (0xF << 20))
        uc.reg_write(arm_const.UC_ARM_REG_FPEXC, 0x40000000)
    _load(uc, path)
    uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE)
    uc.mem_map(SENTINEL, 0x1000)
    functions = functions_of(path)
    starts = {start: (start, end, name, thumb) for start, end, name, thumb in functions}

    def read(address, size):
        return bytes(uc.mem_read(address, size))
    analyses = {thumb: CodeAnalysis(arch, read, [(s, e) for s, e, _, t in functions if t == thumb], thumb=thumb)
                for thumb in ({t for _, _, _, t in functions} or {False})}
    entry_sp = analysis_facts(arch).ENTRY_SP
    word = arch.address_size

    def value(number):
        return uc.reg_read(regs[number])

    def load(address):
        return int.from_bytes(read(address, word), "little")
    sp = STACK_TOP - 0x200
    if arch.ra == arch.pc:                   # the return address on the stack, the argument above it
        uc.mem_write(sp, SENTINEL.to_bytes(word, "little") + argument.to_bytes(word, "little"))
    else:                                    # in the link register and r0
        uc.reg_write(regs[arch.ra], SENTINEL)
        uc.reg_write(regs[0], argument)
    for number in arch.callee_saved:
        uc.reg_write(regs[number], 0x1100 * (number + 1) + 0x11)
    uc.reg_write(regs[arch.sp], sp)
    report, frames = Report(), []

    def on_code(uc_, address, size, _):
        sp_now = value(arch.sp)
        while frames and address == frames[-1].ra and sp_now >= frames[-1].cfa:
            frames.pop()                     # returned (a `ret 4` leaves sp above the CFA)
        if address in starts:
            start, end, name, thumb = starts[address]
            ra = load(sp_now) if arch.ra == arch.pc else value(arch.ra)
            if frames and frames[-1].cfa == sp_now - entry_sp and frames[-1].caller[arch.ra] == ra:
                frames.pop()                 # a tail call: the frame is the caller's
            caller = {n: value(n) for n in arch.callee_saved}
            caller[arch.ra] = ra
            frames.append(Frame(start, end, name, sp_now - entry_sp, caller, ra & ~1 if arch_name == "arm" else ra))
        if not frames:
            return
        top = frames[-1]
        if not top.start <= address < top.end:
            report.outside += 1
            return
        _check(analyses[starts[top.start][3]].function(top.start, top.end), top, address, report, arch, value, load)
    uc.hook_add(unicorn.UC_HOOK_CODE, on_code)
    run = next((s | 1 if t else s) for s, e, n, t in functions if n == "run")
    uc.emu_start(run, SENTINEL, count=2_000_000)
    return report


def _check(result, frame, address, report, arch, value, load):
    report.functions.add(frame.name)
    state = result.states.get(address)
    if state is None:
        report.undecided.append((address, result.gave_up.get(address, "not reached from the start")))
        return
    row, why = unwind_row.row_from_state(state, analysis_facts(arch), arch, address)
    if row is None:
        report.undecided.append((address, why))
        return
    report.rules.add((frame.name, row.text(arch)))
    cfa = value(row.cfa.register) + row.cfa.offset
    if row.cfa.deref:
        cfa = load(cfa)
    where = "%s 0x%x %s" % (frame.name, address, row.text(arch))
    if cfa != frame.cfa:
        report.wrong.append("%s: CFA 0x%x, really 0x%x" % (where, cfa, frame.cfa))
        return
    for number, rule in row.registers.items():
        expected = frame.caller.get(number)
        if rule.kind == RuleKind.OFFSET and load(cfa + rule.offset) != expected:
            report.wrong.append("%s: %s at CFA%+d is 0x%x, the caller's is 0x%x"
                                % (where, arch.name_of(number), rule.offset, load(cfa + rule.offset), expected))
        elif rule.kind == RuleKind.SAME and value(number) != expected:
            report.wrong.append("%s: %s is 0x%x, the caller's is 0x%x"
                                % (where, arch.name_of(number), value(number), expected))
    for number in arch.callee_saved:
        if number not in row.registers and value(number) != frame.caller[number]:
            report.wrong.append("%s: %s said unchanged is 0x%x, the caller's is 0x%x"
                                % (where, arch.name_of(number), value(number), frame.caller[number]))
    report.checked += 1


def analysis_facts(arch):
    from plugin.analysis import FACTS
    return FACTS[arch.name]
