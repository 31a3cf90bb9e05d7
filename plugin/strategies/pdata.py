"""The `pdata` source: Windows unwind data (.pdata/.xdata) of PE images, x64 and ARM64.

PE modules only (plugin/modules/pe.py finds them from their headers in
memory). Per module, the exception directory's RUNTIME_FUNCTION array is
read from the debuggee's memory on first use and cached in
module.cache["pdata"]; the entry holding the lookup pc is found by binary
search, its UNWIND_INFO (x64, chained records followed) or its packed
fields or .xdata record (ARM64) read, and the caller computed as Windows
unwinds: plugin.formats.pdata_eval (x64: the codes by their prolog offset,
an epilogue read from the code) and pdata_arm64_eval (prologue opcodes
already run, epilogue opcodes not yet run).

The answer is also given as a Row of the project's row model: CFA = the
caller's stack pointer, computed from the register the codes start from
(rsp, or the frame register once SET_FPREG has run), each saved register at
CFA + offset (x64 xmm6-15 too, by their SAVE_XMM128 codes). Registers the
Windows ABI lets a callee change (x64 rax, rcx, rdx, r8-r11; ARM64 x0-x18)
are unknown in the caller; the non-volatile ones no code saves keep their values.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from plugin.errors import DecodeError, MemoryReadError
from plugin.formats import pdata_arm64 as a64
from plugin.formats import pdata_arm64_eval, pdata_eval
from plugin.formats import pdata_x64 as x64
from plugin.model.evidence import StepEvidence
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome, error_kind
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.modules.pe import SECTION
from plugin.settings import Trust
from plugin.strategies import ModuleTables

SOURCE = Trust.PDATA.value
# What a callee may change under each Windows ABI: unknown in the caller.
VOLATILE = {"x86_64": frozenset(("rax", "rcx", "rdx", "r8", "r9", "r10", "r11")),
            "aarch64": frozenset("x%d" % n for n in range(19))}
INTEGER_NAMES = {"x86_64": frozenset(x64.GPR + ("rip",)),
                 "aarch64": frozenset(["x%d" % n for n in range(31)] + ["sp", "pc"])}


class PdataTables(ModuleTables):
    """A PE module's RUNTIME_FUNCTION entries, read from memory on first use."""
    SOURCE = SOURCE

    def read_rva(self, rva: int, size: int) -> bytes:
        """Bytes at an RVA of the image, read through the debugger."""
        return self.target.read_memory(self.module.header_address + rva, size)

    @property
    def image_base(self) -> int:
        return self.module.header_address

    def entries(self):
        """x64 RuntimeFunctions or ARM64 Entries sorted by begin; None when absent or unreadable."""
        return self.once(SECTION, self._load)

    def _load(self):
        location = self.module.tables.get(SECTION)
        if location is None:
            return None
        rva = location.address - self.image_base
        if self.module.arch.name == "aarch64":
            found = a64.read_entries(self.read_rva, rva, location.size)
        else:
            found = x64.read_runtime_functions(self.read_rva, rva, location.size)
        return sorted(found, key=lambda e: e.begin)

    def find(self, pc: int):
        """The entry whose function holds pc, or None."""
        entries = self.entries() or []
        rva = pc - self.image_base
        if self.module.arch.name != "aarch64":
            return x64.find(entries, rva)
        return _find_arm64(entries, rva, self.read_rva)


def _find_arm64(entries: List[a64.Entry], rva: int, read) -> Optional[a64.Entry]:
    """ARM64 entries hold no end: the function length comes from the packed word or .xdata."""
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].begin <= rva:
            lo = mid + 1
        else:
            hi = mid
    if not lo:
        return None
    entry = entries[lo - 1]
    length = entry.packed.function_length if entry.packed is not None else \
        a64.read_xdata(read, entry.xdata).function_length if entry.xdata is not None else 0
    return entry if rva < entry.begin + length else None


def step(frame, ctx):
    """Recover frame's caller from the .pdata entry covering its lookup pc."""
    pc, tables = PdataTables.for_frame(frame, ctx)
    if isinstance(tables, Outcome):
        return tables
    module = tables.module
    if module.format != "pe":
        return Outcome.not_applicable(SOURCE, "%s is not a PE image: .pdata is PE only" % module.name,
                                      FailureKind.NOT_SUPPORTED)
    arch = ctx.arch
    names = _register_names(frame.registers, arch)
    try:
        if tables.entries() is None:
            return tables.absent("no exception directory (.pdata)")
        entry = tables.find(pc)
        if entry is None:
            return Outcome.not_applicable(SOURCE, "no .pdata entry of %s covers 0x%x" % (module.name, pc),
                                          FailureKind.NO_ENTRY)
        if arch.name == "aarch64":
            caller, described = _arm64(tables, entry, pc, names, ctx.read_memory)
        else:
            caller, described = _x64(tables, entry, pc, names, ctx.read_memory)
    except KeyError as exc:
        return Outcome.failed(SOURCE, "register %s of the frame is not known" % exc, FailureKind.NOT_SUPPORTED)
    except (DecodeError, MemoryReadError) as exc:
        return Outcome.failed(SOURCE, "bad unwind data in %s: %s" % (module.name, exc), error_kind(exc))
    entry_json, notes = described
    evidence = StepEvidence(source=SOURCE, found_by=".pdata Windows unwind data", lookup_pc=pc,
                            module=module.name, section=SECTION,
                            section_address=module.tables[SECTION].address, entry=entry_json,
                            notes=notes, arch=arch)
    return _outcome(caller, names, evidence, pc)


def _register_names(registers, arch) -> Dict[str, int]:
    """The frame's known integer registers by the names the evaluators use (x64 rax..r15, rip;
    ARM64 x0..x30, sp, pc); `registers` maps DWARF numbers (a debugger's may read them lazily)."""
    names = {}
    for number, name in arch.registers.items():
        if name in INTEGER_NAMES[arch.name]:
            value = registers.get(number)
            if value is not None:
                names[name] = value
    return names


def _x64(tables: PdataTables, fn: x64.RuntimeFunction, pc: int, names: Dict[str, int], read_memory):
    base = tables.image_base
    infos = x64.chain(tables.read_rva, fn)
    root = _root(fn, infos)

    def same_function(address):
        other = tables.find(address)
        return other is not None and _root(other, x64.chain(tables.read_rva, other)) == root
    caller = pdata_eval.unwind_x64(fn, infos, base, pc, names, read_memory, (), same_function)
    entry = {"begin": base + fn.begin, "end": base + fn.end, "unwind_info": base + fn.unwind_info,
             "chain": [base + i.rva for i in infos],
             "prolog_offset": pc - (base + fn.begin), "epilogue": caller.epilogue}
    notes = ["RUNTIME_FUNCTION 0x%x-0x%x, UNWIND_INFO at 0x%x%s" % (
        base + fn.begin, base + fn.end, base + fn.unwind_info,
        " chained to %s" % ", ".join("0x%x" % (base + i.rva) for i in infos[1:]) if len(infos) > 1 else "")]
    if caller.epilogue:
        notes.append("0x%x is in an epilogue: its remaining instructions are simulated from the code, "
                     "as Windows does, instead of applying the codes" % pc)
    else:
        applied = [c for depth, i in enumerate(infos) for c in i.codes
                   if depth or c.offset <= pc - (base + fn.begin)]
        notes.append("prolog offset %d: %d of the codes apply (%s)" % (
            pc - (base + fn.begin), len(applied), ", ".join(c.op.name for c in applied) or "none"))
    return caller, (entry, notes)


def _root(fn: x64.RuntimeFunction, infos) -> x64.RuntimeFunction:
    """The entry a chain of records ends at: the function a chained piece belongs to."""
    return infos[-2].chained if len(infos) > 1 else fn


def _arm64(tables: PdataTables, entry: a64.Entry, pc: int, names: Dict[str, int], read_memory):
    base = tables.image_base
    xdata = a64.read_xdata(tables.read_rva, entry.xdata) if entry.xdata is not None else None
    caller = pdata_arm64_eval.unwind_arm64(entry, xdata, base, pc, names, read_memory)
    described = {"begin": base + entry.begin, "flag": entry.flag.name,
                 "offset": pc - (base + entry.begin)}
    if xdata is not None:
        described["xdata"] = base + xdata.rva
    return caller, (described, ["ARM64 .pdata entry at 0x%x, %s" % (base + entry.begin, entry.flag.name)])


def row_of(caller, names: Dict[str, int], arch, pc: int) -> Row:
    """The evaluation's answer as a row: CFA = the register it started from + offset, each
    saved register at CFA + offset (x64: the return address at CFA-8)."""
    rules = {}
    for name, address in caller.saved_at.items():
        name = "v" + name[1:] if name.startswith("d") else name      # ARM64 d8-d15: the low halves of v8-v15
        if name in arch.registers.values():
            rules[arch.number_of(name)] = Rule(RuleKind.OFFSET, address - caller.cfa)
    for number, address in getattr(caller, "xmm_saved_at", {}).items():     # x64 SAVE_XMM128: xmm6-15
        rules[arch.number_of("xmm%d" % number)] = Rule(RuleKind.OFFSET, address - caller.cfa)
    if arch.name == "x86_64":
        rules[arch.ra] = Rule(RuleKind.OFFSET, -8)
    return Row(pc, CfaRule(CfaKind.REGISTER, arch.number_of(caller.cfa_register),
                           caller.cfa - names.get(caller.cfa_register, 0)), rules, end=pc + arch.min_instruction_size)


MADE_UP_STACK = 0x7ff000000000     # register values static_row evaluates with: far from any image


def static_row(tables: PdataTables, pc: int) -> Optional[Row]:
    """The row the source gives at pc, whatever the registers hold (its offsets do not depend on
    them): evaluated from made-up values, the stack read as zeros. None where no entry covers pc,
    or where an x64 machine frame is pushed (the caller's rsp is read from the stack there).
    DecodeError, MemoryReadError for bad unwind data."""
    module, arch = tables.module, tables.module.arch
    entry = tables.find(pc)
    if entry is None:
        return None
    names = {name: MADE_UP_STACK + 0x1000 * k for k, name in enumerate(sorted(INTEGER_NAMES[arch.name]))}
    names[arch.name_of(arch.pc)] = pc

    def read(address, size):
        inside = module.contains(address) and module.contains(address + size - 1)
        return tables.target.read_memory(address, size) if inside else bytes(size)
    if arch.name == "aarch64":
        caller, _ = _arm64(tables, entry, pc, names, read)
    else:
        if any(c.op == x64.Op.PUSH_MACHFRAME for i in x64.chain(tables.read_rva, entry) for c in i.codes):
            return None
        caller, _ = _x64(tables, entry, pc, names, read)
    return row_of(caller, names, arch, pc)


def _outcome(caller, names: Dict[str, int], evidence: StepEvidence, pc: int) -> Outcome:
    arch = evidence.arch
    volatile = VOLATILE[arch.name]
    pc_name, sp_name = arch.name_of(arch.pc), arch.name_of(arch.sp)
    ra = caller.rip if arch.name == "x86_64" else caller.pc
    registers = {}
    for name, value in caller.registers.items():
        if name in volatile or name in (pc_name, sp_name):
            continue
        try:
            registers[arch.number_of(name)] = value
        except KeyError:
            continue
    registers[arch.sp] = caller.cfa
    registers[arch.pc] = ra
    evidence.rule = row_of(caller, names, arch, pc)
    evidence.cfa = caller.cfa
    evidence.caller_registers = registers
    return Outcome(AttemptStatus.RECOVERED, SOURCE, registers=registers, evidence=evidence)
