"""What one fuzz input runs: every path from bytes to output, each held to what
it documents (used by fuzz_targets.py; each call runs in a forked child).

A whole file goes through the offline commands as a user runs them
(`tables` in text, JSON or at an address; `validate`), then, as a debugger
would use it, through a walk from fake registers over a fake stack, the
explanation of every frame (text and JSON) and the evaluation of the CFI
and SFrame rows in force at those pcs. A bare section goes through its
decoder and its dump. What must hold:

- `python -m plugin` ends with a status (0/1/2), never an exception; its
  JSON parses; a status 2 is one line on stderr.
- engine.unwind answers with a Backtrace (a strategy never raises) and the
  renderers render whatever it holds.
- decoders raise DecodeError only (MemoryReadError for memory a reader
  could not supply, where they say so); evaluate_row raises RowError
  only; dwarf_expr.disassemble and render.expression never raise.

A violation raises (Finding, or the escaping exception itself), which the
driver records as a finding.
"""
from __future__ import annotations

import contextlib
import io
import json
import random

from plugin.errors import DecodeError, MemoryReadError, bad_file_errors
from plugin.target import Mapping, Target

STACK_BASE = 0x7FFF0000         # the fake stack (32-bit safe: armhf and i386 read it too)
STACK_SIZE = 0x4000


class Finding(Exception):
    """A documented property that did not hold."""


def cli(argv: list) -> tuple:
    """(status, stdout, stderr) of plugin.__main__.main(argv), run in this process."""
    from plugin.__main__ import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:       # argparse's own exit
            status = exc.code
    if status not in (0, 1, 2):
        raise Finding("exit status %r" % status)
    if status == 2 and len(err.getvalue().strip().splitlines()) != 1:
        raise Finding("status 2 without a one-line error: %r" % err.getvalue()[:300])
    return status, out.getvalue(), err.getvalue()


def tables_command(path: str, rng: random.Random) -> str:
    """`tables` in one of its forms; its JSON must parse."""
    form = rng.choice(("text", "json", "address", "address-json"))
    argv = ["tables", path] + (["--json"] if form.endswith("json") else [])
    if form.startswith("address"):
        argv += ["--address", hex(rng.randrange(1 << 24))]
    status, out, _ = cli(argv)
    if status != 2 and form.endswith("json"):
        try:
            json.loads(out)
        except ValueError as exc:
            raise Finding("tables --json printed no JSON: %s" % exc) from None
    return "tables %s rc %d" % (form, status)


def validate_command(path: str, rng: random.Random) -> str:
    argv = ["validate", path] + (["--json"] if rng.random() < 0.5 else []) + \
        rng.choice(([], [], ["--function", "main"], ["--address", hex(rng.randrange(1 << 24))]))
    status, out, _ = cli(argv)
    if status != 2 and "--json" in argv:
        try:
            json.loads(out)
        except ValueError as exc:
            raise Finding("validate --json printed no JSON: %s" % exc) from None
    return "validate rc %d" % status


class FakeProcess(Target):
    """A file laid out as the loader would, plus a stack of random words: a stopped
    process as far as the strategies can tell."""

    def __init__(self, file_target, rng: random.Random):
        self.file = file_target
        self.arch = file_target.arch
        size = self.arch.address_size
        words = []
        for _ in range(STACK_SIZE // size):
            pick = rng.random()
            if pick < 0.3:          # a return address, maybe
                value = rng.choice(self.code_addresses()) if self.code_addresses() else 0
            elif pick < 0.6:        # a saved frame pointer, maybe
                value = STACK_BASE + rng.randrange(STACK_SIZE)
            else:
                value = rng.getrandbits(8 * size)
            words.append(value.to_bytes(size, self.arch.byteorder))
        self.stack = b"".join(words)

    def code_addresses(self) -> list:
        if not hasattr(self, "_code"):
            self._code = [m.start + (m.end - m.start) // 2 for m in self.file.mappings() if m.executable]
        return self._code

    def read_memory(self, address, size):
        if STACK_BASE <= address and address + size <= STACK_BASE + STACK_SIZE:
            return self.stack[address - STACK_BASE:address - STACK_BASE + size]
        return self.file.read_memory(address, size)

    def modules(self):
        return self.file.modules()

    def mappings(self):
        return self.file.mappings() + [Mapping(STACK_BASE, STACK_BASE + STACK_SIZE, True, True, False, "[stack]")]

    def symbol(self, address):
        return self.file.symbol(address)


def pcs_in_code(target, rng: random.Random, count: int) -> list:
    """Addresses in the file's executable pieces (where the tables are about)."""
    code = [m for m in target.mappings() if m.executable and m.end > m.start]
    return [rng.randrange(m.start, m.end) for m in (rng.choice(code) for _ in range(count))] if code else []


def pcs_in_tables(modules, process, rng: random.Random, count: int) -> list:
    """Addresses inside the entries of each source's tables (a bad table gives none)."""
    from plugin.strategies.cfi import CfiTables
    from plugin.strategies.compact import CompactTables
    from plugin.strategies.exidx import ExidxTables
    from plugin.strategies.sframe import SFrameTables
    ranges = []
    for module in modules.all():
        readers = (
            lambda: [(f.start, f.end) for _, section in CfiTables.of(module, process).sections()
                     for f in section.fdes()[:64]],
            lambda: [(f.start, f.end) for f in (SFrameTables.of(module, process).section() or _NONE).fdes[:64]],
            lambda: [(e.function, e.end or e.function + 16) for e in (ExidxTables.of(module, process).table()
                                                                     or _NONE).entries()[:64]],
            lambda: [(s, e) for s, e, _ in (CompactTables.of(module, process).unwind_info() or _NONE).entries()[:64]])
        for read in readers:
            try:
                ranges += [r for r in read() if r[1] > r[0]]
            except DecodeError:
                continue
    return [rng.randrange(*rng.choice(ranges)) for _ in range(count)] if ranges else []


class _NONE:
    """A missing table: no entries."""
    fdes = ()

    @staticmethod
    def entries():
        return []


def fake_registers(arch, pc: int, rng: random.Random) -> dict:
    registers = {}
    for number in arch.registers:
        pick = rng.random()
        if pick < 0.5:
            registers[number] = STACK_BASE + rng.randrange(STACK_SIZE) & ~(arch.address_size - 1)
        elif pick < 0.8:
            registers[number] = rng.getrandbits(8 * arch.address_size)
    registers[arch.pc] = pc
    registers[arch.sp] = STACK_BASE + rng.randrange(STACK_SIZE // 2) & ~15
    return registers


def walk_explain_evaluate(path: str, rng: random.Random) -> str:
    """A debugger's use of the file: walks from fake registers, every frame explained,
    the CFI and SFrame rows at those pcs evaluated."""
    from plugin.file_targets import load
    from plugin.engine import DEFAULT_SOURCES, unwind
    from plugin.modules import ModuleMap
    from plugin.render import explain
    try:
        target, _ = load(path)
    except bad_file_errors():
        return "not opened"
    if getattr(target, "relocatable", False) or target.header_address is None:
        return "object file: no walk"
    process = FakeProcess(target, rng)
    modules = ModuleMap(process)
    arch = process.arch
    stops = []
    for pc in pcs_in_code(target, rng, 1) + pcs_in_tables(modules, process, rng, 3):
        registers = fake_registers(arch, pc, rng)
        sources = list(DEFAULT_SOURCES) + (["scan"] if rng.random() < 0.3 else [])
        bt = unwind(process, registers, sources=sources, max_frames=6, modules=modules,
                    exact_pc=rng.random() < 0.7)
        stops.append(str(bt.stop_reason))
        explain.backtrace_text(bt, arch)
        json.dumps(explain.backtrace_json(bt, arch, detail=True))
        explain.explain_frames_text(bt.frames, bt.frames, arch, verbose=rng.random() < 0.5, width=100)
        evaluate_rows_at(process, modules, pc, registers)
    return "walked (%s)" % ", ".join(sorted(set(stops))) if stops else "no code"


def evaluate_rows_at(process, modules, pc: int, registers: dict) -> None:
    """The CFI and SFrame rows in force at pc evaluated: RowError is their only failure."""
    from plugin.strategies.cfi import CfiTables
    from plugin.strategies.evaluate import RowError, evaluate_row
    from plugin.strategies.sframe import SFrameTables
    module = modules.find(pc)
    if module is None:
        return
    for tables in (CfiTables.of(module, process), SFrameTables.of(module, process)):
        try:
            hit = tables.row_for(pc)
        except DecodeError:
            continue
        if hit is None:
            continue
        try:
            evaluate_row(hit[-1], module.arch, registers, process.read_memory)
        except RowError:
            pass


def exercise_file(path: str, rng: random.Random, validate: bool = False) -> str:
    """One whole (damaged) file through the offline commands and a debugger's use."""
    done = [tables_command(path, rng)]
    if validate:
        done.append(validate_command(path, rng))
    done.append(walk_explain_evaluate(path, rng))
    return "; ".join(done)


# -- bare sections ---------------------------------------------------------------

def exercise_expression(data: bytes, rng: random.Random) -> str:
    """A DWARF expression run against fake registers and memory, disassembled, and
    spelled as the explanations spell rules."""
    from plugin.arch import BY_NAME
    from plugin.formats import dwarf_expr
    from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
    from plugin.render.expression import cfa_text, readable, row_rules
    from plugin.strategies.evaluate import RowError, evaluate_row
    arch = BY_NAME[rng.choice(("x86_64", "aarch64", "i386", "arm", "s390x"))]
    memory = {}

    def read_memory(address, size):
        if address % 7 == 0:
            raise MemoryReadError(address, size)
        return memory.setdefault((address, size), rng.getrandbits(8 * size).to_bytes(size, arch.byteorder))

    registers = fake_registers(arch, 0x1000, rng)
    dwarf_expr.disassemble(data, arch)
    readable(data, arch)
    outcome = "value"
    try:
        dwarf_expr.evaluate(data, arch=arch, read_register=registers.get, read_memory=read_memory,
                            initial_stack=(STACK_BASE,), cfa=STACK_BASE,
                            bases={"text": 0x1000, "data": 0x2000, "func": 0x1000, "expression": 0x3000})
    except (DecodeError, MemoryReadError) as exc:
        outcome = type(exc).__name__
    row = Row(0x1000, CfaRule(CfaKind.EXPRESSION, expression=data),
              {arch.ra: Rule(rng.choice((RuleKind.EXPRESSION, RuleKind.VAL_EXPRESSION)), expression=data)},
              end=0x1010)
    cfa_text(row.cfa, arch, verbose=True)
    row_rules(row, arch, verbose=True)
    row.text(arch)
    json.dumps(row.to_json(arch))
    try:
        evaluate_row(row, arch, registers, read_memory)
    except RowError:
        pass
    return "expression: %s" % outcome


def exercise_sframe(data: bytes, rng: random.Random) -> str:
    """A bare .sframe section: decoded, every FDE dumped (JSON and text), rows looked up."""
    from plugin.arch import BY_NAME
    from plugin.formats.sframe import SFrameSection
    from plugin.memory import Region
    from plugin.render import sframe_dump
    arch = BY_NAME[rng.choice(("x86_64", "aarch64", "s390x"))]
    address = 0x10000
    try:
        section = SFrameSection(Region.from_bytes(".sframe", address, data, arch.byteorder), arch)
        for index, fde in enumerate(section.fdes[:64]):
            entry = sframe_dump.fde_table_json(section, index, fde, arch)
            json.dumps(entry)
            sframe_dump.entry_text(entry)
            for fre in section.fres(fde)[:16]:
                row = section.row(fde, fre)
                json.dumps(sframe_dump.entry_json(section, index, fde, fre, row, arch))
        for pc in [address + rng.randrange(1 << 16) for _ in range(8)]:
            found = section.find(pc)
            if found is not None:
                section.row(found[1], found[2], pc)
    except DecodeError:
        return "sframe: DecodeError"
    return "sframe: decoded"


def exercise_unwind_info(data: bytes, rng: random.Random) -> str:
    """A bare __unwind_info section: decoded, every entry's opcode decoded and its row made."""
    from plugin.arch import BY_NAME
    from plugin.formats.compact_unwind import UnwindInfo
    from plugin.memory import Region
    arch = BY_NAME["aarch64" if rng.random() < 0.8 else rng.choice(("x86_64", "i386"))]   # the seeds are arm64's
    base = 0x100000000 if arch.address_size == 8 else 0x1000

    def read_code(address, size):
        return bytes(rng.getrandbits(8) for _ in range(size))

    try:
        info = UnwindInfo(Region.from_bytes("__unwind_info", 0x4000, data), arch, base)
        records = info.entry_records()[:256]
        for _ in range(8):
            found = info.lookup(base + rng.randrange(1 << 20))
            if found is not None:
                records.append(found)
        for entry in records:
            info.decode(entry)
            try:
                row = info.row(entry, read_code)
            except MemoryReadError:
                continue
            if hasattr(row, "text"):
                row.text(arch)
    except DecodeError:
        return "compact: DecodeError"
    return "compact: decoded"
