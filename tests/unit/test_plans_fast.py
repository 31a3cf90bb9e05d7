"""A plan's FastRow (plugin/plans.py) gives what the engine's replay gives, as GDB's unwinder hands it.

The GDB unwinder replays a FastRow on the complete register file a previous
claim handed on. Whatever it gives must be what the slow path gives from
the engine's own evaluator (evaluate_row through plans.replay): the caller's
registers where the row or the ABI gives them, the callee's value where the
row says nothing (GDB's rule for an unspecified register), nothing where a
rule leaves no value; and a decline exactly where replay declines. Rows,
registers, stack bytes (with an unreadable hole) and code checks are drawn
at random from fixed seeds.
"""

import random
from types import SimpleNamespace

from plugin import arch as arches
from plugin.errors import MemoryReadError
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.plans import ReplayPlan, compile_row, evaluate_fast, replay, replay_fast
from plugin.strategies.evaluate import RowError, evaluate_row

X86 = arches.by_name("x86_64")
STACK, STACK_END = 0x7ff000, 0x803000
HOLE, HOLE_END = 0x800ff0, 0x801010       # unreadable: crosses a page boundary
PLAIN_KINDS = (RuleKind.OFFSET, RuleKind.OFFSET, RuleKind.VAL_OFFSET, RuleKind.REGISTER, RuleKind.SAME,
               RuleKind.UNDEFINED)


def _context(rng):
    stack = bytearray(rng.randbytes(STACK_END - STACK))
    for at in range(0, len(stack), 64):     # words that point into the stack: what an indirect CFA reads
        stack[at:at + 8] = rng.randrange(STACK, STACK_END).to_bytes(8, "little")
    stack = bytes(stack)
    mapped = rng.random() < 0.5

    def read_memory(address, size):
        if address < STACK or address + size > STACK_END or (address < HOLE_END and address + size > HOLE):
            raise MemoryReadError(address, size, "unreadable")
        return stack[address - STACK:address - STACK + size]
    code = rng.random() < 0.9
    return SimpleNamespace(arch=X86, read_memory=read_memory, knows_mappings=lambda: mapped,
                           is_code=lambda address: code or address % 7 != 0)


def _rule(rng, kind):
    if kind in (RuleKind.OFFSET, RuleKind.VAL_OFFSET):
        return Rule(kind, offset=rng.choice((-8, -16, -24, -48, -56, 8, -8 * rng.randrange(1, 200))))
    if kind == RuleKind.REGISTER:
        return Rule(kind, register=rng.choice(sorted(X86.registers)))
    return Rule(kind)


def _row(rng):
    registers = {}
    for number in rng.sample(sorted(X86.registers), rng.randrange(0, 8)):
        registers[number] = _rule(rng, rng.choice(PLAIN_KINDS))
    registers[X86.pc] = _rule(rng, rng.choice((RuleKind.OFFSET, RuleKind.OFFSET, RuleKind.VAL_OFFSET,
                                                RuleKind.REGISTER)))
    return Row(0x1000, _cfa(rng, (X86.sp, X86.sp, 6, 3)), registers)


def _cfa(rng, registers):
    """register + offset, or (one in four) the word there plus an offset (SFrame's flex form, ORC's
    indirect CFAs)."""
    register, offset = rng.choice(registers), rng.choice((8, 16, 64, 0))
    if rng.random() < 0.25:
        return CfaRule(CfaKind.REGISTER, register=register, offset=offset, deref=True, added=rng.choice((0, 16, 24)))
    return CfaRule(CfaKind.REGISTER, register=register, offset=offset)


def _values(rng):
    values = {}
    for number in X86.registers:
        if rng.random() < 0.9 or number == X86.sp:
            values[number] = rng.randrange(STACK, STACK_END) if rng.random() < 0.6 else rng.randrange(1 << 64)
    return values


def _handed(expected, row, values):
    """What the slow path hands GDB from the engine's replay: the caller's value, nothing for a
    ruled register without one, else the callee's value (GDB's rule for unspecified registers)."""
    handed = {}
    for number in X86.registers:
        if number in expected.registers:
            handed[number] = expected.registers[number]
        elif number not in row.registers and values.get(number) is not None:
            handed[number] = values[number]
    return handed


def test_fast_replay_equals_the_engines_replay_on_random_rows():
    outcomes = {"claimed": 0, "declined": 0, "indirect": 0}
    for seed in range(3000):
        rng = random.Random(seed)
        ctx, row, values = _context(rng), _row(rng), _values(rng)
        fast = compile_row(row, X86)
        assert fast is not None, row.text(X86)
        plan = ReplayPlan("cfi", row, 0x1000, rng.random() < 0.2, fast, switches=row.cfa.deref and rng.random() < 0.5)
        expected, got = replay(plan, values, ctx), replay_fast(plan, dict(values), ctx)
        if expected is None:
            assert got is None, (seed, row.text(X86))
            outcomes["declined"] += 1
            continue
        assert got is not None, (seed, row.text(X86))
        assert got.cfa == expected.cfa and got.start == plan.start
        assert got.registers == _handed(expected, row, values), (seed, row.text(X86))
        outcomes["claimed"] += 1
        outcomes["indirect"] += row.cfa.deref
    assert outcomes["claimed"] > 600 and outcomes["declined"] > 600 and outcomes["indirect"] > 30, outcomes


def test_rows_only_the_evaluator_applies_have_no_fast_form():
    plain = {X86.pc: Rule(RuleKind.OFFSET, offset=-8)}
    sp_plus_8 = CfaRule(CfaKind.REGISTER, register=X86.sp, offset=8)
    assert compile_row(Row(0, sp_plus_8, dict(plain)), X86).whole_file
    for row in (Row(0, CfaRule(CfaKind.EXPRESSION, expression=b"\x77\x08"), dict(plain)),
                Row(0, sp_plus_8, {X86.pc: Rule(RuleKind.EXPRESSION, expression=b"\x77\x08")}),
                Row(0, sp_plus_8, {**plain, 3: Rule(RuleKind.VAL_EXPRESSION, expression=b"\x77\x08")}),
                Row(0, sp_plus_8, {**plain, 40: Rule(RuleKind.OFFSET, offset=-16)})):   # not a handed register
        assert compile_row(row, X86) is None, row.to_json(X86)
    # Plain rows whose return address only the evaluator's return_address explains: compiled
    # (LLDB's fast path applies them as evaluate_row does), but not replayed on a whole file.
    aarch64 = arches.by_name("aarch64")     # the return address is x30, not the pc column
    for row, arch in ((Row(0, sp_plus_8, {X86.pc: Rule(RuleKind.UNDEFINED)}), X86),     # outermost
                      (Row(0, sp_plus_8, {}), X86),
                      (Row(0, sp_plus_8, dict(plain), ra_signed=True), X86),
                      (Row(0, CfaRule(CfaKind.REGISTER, register=aarch64.sp, offset=16),
                           {30: Rule(RuleKind.OFFSET, offset=-8)}), aarch64)):
        fast = compile_row(row, arch)
        assert fast is not None and not fast.whole_file, row.to_json(arch)


def _arch_row(rng, arch):
    """A plain row for arch, its return-address rule drawn too (missing, undefined, same)."""
    numbers = sorted(arch.registers)
    registers = {}
    for number in rng.sample(numbers, rng.randrange(0, 8)) + [arch.ra]:
        kind = rng.choice(PLAIN_KINDS)
        if kind in (RuleKind.OFFSET, RuleKind.VAL_OFFSET):
            registers[number] = Rule(kind, offset=rng.choice((-8, -16, 8, -8 * rng.randrange(1, 200))))
        elif kind == RuleKind.REGISTER:
            registers[number] = Rule(kind, register=rng.choice(numbers))
        else:
            registers[number] = Rule(kind)
    if rng.random() < 0.1:
        registers.pop(arch.ra)
    return Row(0x1000, _cfa(rng, (arch.sp, arch.sp, numbers[3], 400)), registers, ra_signed=rng.random() < 0.2)


def test_lldbs_fast_evaluation_equals_the_evaluator_on_random_rows():
    """plans.evaluate_fast (LLDB's `unwind backtrace` fast path) gives evaluate_row's CFA and
    caller registers, and declines exactly where evaluate_row raises."""
    counts = {"equal": 0, "raised": 0, "indirect": 0}
    for name in ("x86_64", "aarch64"):
        arch = arches.by_name(name)
        for seed in range(1500):
            rng = random.Random(seed)
            ctx, row = _context(rng), _arch_row(rng, arch)
            values = {n: v for n, v in _values(rng).items() if rng.random() < 0.9}
            if name == "aarch64":
                values = {n: rng.randrange(STACK, STACK_END) for n in arch.registers if rng.random() < 0.9}
            fast = compile_row(row, arch)
            assert fast is not None, row.text(arch)
            try:
                expected = evaluate_row(row, arch, values, ctx.read_memory)
            except RowError:
                expected = None
            got = evaluate_fast(fast, arch, values, ctx.read_memory)
            if expected is None:
                assert got is None, (name, seed, row.text(arch))
                counts["raised"] += 1
                continue
            assert got == (expected.cfa, expected.registers), (name, seed, row.text(arch))
            assert set(fast.undefined) == expected.undefined
            counts["equal"] += 1
            counts["indirect"] += row.cfa.deref
    assert counts["equal"] > 1200 and counts["raised"] > 300 and counts["indirect"] > 60, counts
