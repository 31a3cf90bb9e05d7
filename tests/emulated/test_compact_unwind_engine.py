"""The `compact` source driven by the engine, proven on real execution in Unicorn.

tests/fixtures/macho/unwind_engine.c (unwind_shapes.c plus a caller whose CFI
only DWARF can express) is built for x86_64 and arm64 over the flag matrix
of test_compact_built, loaded at a slide in Unicorn and run from
engine_main(DEPTH); tests/helpers/compact_unwind_support.py keeps a shadow
stack of the truth (each active call's return address, the caller's stack
pointer and the caller's callee-saved registers, taken at the callee's
first instruction).

1. Chains. The run is stopped (first hit) at
     entry  stop_here's first instruction,
     call   chain3's call instruction to stop_here (innermost in a body),
     ret    stop_here's return instruction,
     dwarf  dwarf_only + 4 (a DWARF-mode leaf, after its first push/stp),
   the process is frozen into a SnapshotTarget, and plugin.engine.unwind
   walks it with the `compact` source alone and with the default sources.
   Both must give exactly the recorded chain of (return address, caller's
   sp), innermost first, and every caller's callee-saved registers, then
   stop at the sentinel return address of engine_main. The chains pass
   through every opcode kind: RBP_FRAME (x86_64 -O0/-O2), STACK_IMMD and
   STACK_IND (x86_64 -fomit-frame-pointer), FRAME (arm64 -O0/-O2),
   FRAMELESS (arm64 leaves), and DWARF escapes both in leaves and in
   callers (dwarf_caller on both; every arm64 -fomit-frame-pointer caller).

2. Every instruction. engine_main runs to completion and at every
   instruction of every function (except engine_main, whose caller is the
   sentinel) the compact rule is evaluated for the innermost frame:
     row     the opcode's own row (for DWARF-mode opcodes: the FDE's row),
             evaluated against the emulator's registers and memory;
     engine  plugin.engine.step_frame with sources ("compact",), which uses
             the ABI's entry rule at a function's first instruction and at
             a return instruction.
   "Right" means the CFA equals the caller's sp and the return address is
   the recorded one. An instruction counts once (its address), and is right
   only if it was right every time it ran.

   Measured with clang-16 / ld64.lld-16: unique instructions executed, split
   by the kind of opcode covering them ("compact": RBP_FRAME, STACK_IMMD,
   STACK_IND, FRAME, FRAMELESS; "DWARF": the FDE an escape points at). The
   test prints these figures (run it with -s):

     build          compact: instrs  row right  engine right | DWARF: instrs  row right  engine right
     x86_64 O2-fp            378     333 (88%)   363 (96%)   |         16      16 (100%)  16 (100%)
     x86_64 O2-nofp          332     253 (76%)   279 (84%)   |         22      22 (100%)  22 (100%)
     x86_64 Os-nofp          375     282 (75%)   310 (83%)   |         22      22 (100%)  22 (100%)
     x86_64 O0               491     443 (90%)   475 (97%)   |         16      16 (100%)  16 (100%)
     arm64  O2-fp            391     301 (77%)   325 (83%)   |         24      20 (83%)   22 (92%)
     arm64  O2-nofp           32      27 (84%)    29 (91%)   |        372     349 (94%)  362 (97%)
     arm64  Os-nofp           32      27 (84%)    29 (91%)   |        347     323 (93%)  337 (97%)
     arm64  O0               532     463 (87%)   493 (93%)   |         31      27 (87%)   29 (94%)

   Where it is wrong, and why (every wrong instruction is in a prologue, the
   run from the function's entry to where the frame is complete, or in an
   epilogue, the run that ends at a return; none is anywhere else):
     * RBP_FRAME (CFA = rbp+16): wrong at the entry and at the `mov %rsp,
       %rbp` after `push %rbp` (rbp is still the caller's), and at the `ret`
       after `pop %rbp`: two prologue and one epilogue instruction per
       function. The engine's entry and return rules fix all but the `mov`.
     * STACK_IMMD / STACK_IND (CFA = rsp + the whole frame): wrong at the
       entry, at every `push` and at the `sub` (each before it has run),
       and at every `pop` and the `ret` once the `add` has released the
       frame: the more saved registers, the more instructions, which is why
       the -fomit-frame-pointer builds have the lowest figures.
     * FRAME (arm64, CFA = x29+16): wrong at every instruction up to and
       including the `add x29, sp, #n` / `mov x29, sp` that sets the frame
       pointer, and after `ldp x29, x30` has run in the epilogue.
     * FRAMELESS (arm64 leaves): wrong only while `sub sp` / `add sp` are
       not yet / no longer in effect (-O0); -O2 leaves with no stack are
       right everywhere.
     * DWARF escapes use the FDE's rows, exact where the CFI is: x86_64
       everywhere; on arm64 clang (Darwin) writes no epilogue CFI, so the
       rows are wrong from where the epilogue releases the stack (`add sp`,
       `ldp ..., [sp], #n`) to the `ret` (and the hand-written dwarf_only
       has none either). The engine's return rule fixes the `ret` itself.
   Callers are always looked up at a call site, inside the body, where every
   mode is exact; the chains above prove it.

Needs the `unicorn` Python package (a test dependency in pyproject.toml).
"""

from collections import defaultdict

import pytest

from compact_unwind_support import BUILDS, SENTINEL, STOPS, Emulation, EmulatorTarget, build_id, frozen_at

from plugin import engine
from plugin.model.evidence import Frame
from plugin.formats import cfi
from plugin.modules import ModuleMap
from plugin.strategies.evaluate import RowError, evaluate_row
from plugin.strategies.compact import CompactTables
from plugin.model.stops import StopReason

# ---------------------------------------------------------------------------
# 1. Chains
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def emulations():
    cache = {}

    def get(arch, flags):
        if (arch, flags) not in cache:
            cache[arch, flags] = Emulation(arch, flags)
        return cache[arch, flags]
    return get


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("arch,flags", BUILDS, ids=build_id)
def test_engine_recovers_the_emulated_chain(emulations, arch, flags, stop):
    em = emulations(arch, flags)
    snapshot, truth = frozen_at(em, stop)
    names = [frame[0] for frame in truth]
    assert names[0] == "engine_main"
    if stop == "dwarf":
        # shapes_main may tail-call it (-O2): then its frame is gone
        assert names in (["engine_main", "shapes_main", "dwarf_only"], ["engine_main", "dwarf_only"])
    else:
        assert names[1:4] == ["dwarf_caller", "through_dwarf", "recurse"]
        innermost = ["chain3"] if stop == "call" else ["chain3", "stop_here"]
        assert names[-len(innermost) - 2:] == ["chain1", "chain2"] + innermost
    # innermost first: (return address, caller's sp, caller's callee-saved registers)
    expected = [(ra, sp, saved) for _, ra, sp, saved in reversed(truth)]
    module_sources = ("compact",), engine.DEFAULT_SOURCES
    for sources in module_sources:
        bt = engine.unwind(snapshot, snapshot.registers, sources=sources)
        callers = bt.frames[1:]
        got = [(f.pc, f.registers.get(em.sp)) for f in callers]
        assert got == [(ra, sp) for ra, sp, _ in expected[:-1]], (sources, names)
        for frame, (_, _, saved) in zip(callers, expected):
            assert {n: frame.registers.get(n) for n in saved} == saved, (sources, frame.level, frame.function)
        # every caller came from compact unwind, and the walk ends at the sentinel
        assert {f.method for f in callers} == {"compact"}
        assert bt.stop_reason == StopReason.RETURN_ADDRESS_NOT_CODE and "0x%x" % SENTINEL in bt.stop_detail
    modes = {f.evidence.entry["mode"] for f in callers}
    found_by = {f.evidence.found_by for f in callers}
    if stop != "dwarf":
        # the DWARF-mode caller: its FDE row, reached through the opcode's offset
        outer = callers[-1]
        assert outer.function == "engine_main" and outer.evidence.entry["mode"] == "DWARF"
        assert outer.evidence.entry["fde_offset"] >= 0
        assert any("DWARF escape -> __eh_frame FDE at +0x%x" % outer.evidence.entry["fde_offset"] in note
                   for note in outer.evidence.notes)
    if stop == "entry" and callers[0].evidence.entry["mode"] != "DWARF":
        assert callers[0].evidence.found_by.endswith("ABI rule at entry")
    if stop == "ret":
        assert callers[0].evidence.found_by.endswith("ABI rule at return")
        assert any("a return instruction" in note for note in callers[0].evidence.notes)
    assert modes and found_by


def test_the_chains_covered_every_opcode_kind(emulations):
    """Every mode of both architectures recovered at least one frame above
    (re-walked here so the test does not depend on the others' order)."""
    seen = defaultdict(set)
    for arch, flags in BUILDS:
        em = emulations(arch, flags)
        for stop in STOPS:
            snapshot, _ = frozen_at(em, stop)
            bt = engine.unwind(snapshot, snapshot.registers, sources=("compact",))
            for frame in bt.frames[1:]:
                entry = frame.evidence.entry
                seen[arch].add(entry["mode"])
                if entry["mode"] == "DWARF" and frame.function != "engine_main" and stop != "dwarf":
                    seen[arch].add("DWARF caller")
            # the innermost frame's own mode (leaves are frameless or DWARF)
            if len(bt.frames) > 1:
                seen[arch].add("innermost " + bt.frames[1].evidence.entry["mode"])
    assert {"RBP_FRAME", "STACK_IMMD", "STACK_IND", "DWARF", "DWARF caller"} <= seen["x86_64"], seen
    assert {"FRAME", "DWARF", "DWARF caller"} <= seen["arm64"], seen
    assert "innermost FRAMELESS" in seen["arm64"], seen


# ---------------------------------------------------------------------------
# 2. Every instruction
# ---------------------------------------------------------------------------

def _measure(em):
    """{pc: [row right, engine right, function, mode]} over a whole run."""
    target = EmulatorTarget(em)
    modules = ModuleMap(target)
    (module,) = modules.all()
    tables = CompactTables.of(module, target)
    ui = tables.unwind_info()
    ctx = engine.UnwindContext(target, modules, ("compact",))
    arch = em.arch
    results = {}

    def on_instruction(address):
        function = em.function_at(address)
        if function in (None, "engine_main") or not em.shadow or em.shadow[-1][0] != function:
            return False
        _, ra, caller_sp, _ = em.shadow[-1]
        registers = em.registers()
        entry = ui.lookup(address)
        decoded = ui.decode(entry)
        if decoded.mode == "DWARF":
            _, fde = tables.dwarf_fde(decoded)
            row = cfi.row_at(fde, address, arch)
        else:
            row = ui.row(entry, read_code=tables.read_code)
        try:
            result = evaluate_row(row, arch, registers, target.read_memory)
            row_right = result.cfa == caller_sp and result.registers.get(arch.ra) == ra
        except RowError:
            row_right = False
        frame = Frame(level=0, pc=address, registers=registers, method="context", exact_pc=True)
        outcome, _ = engine.step_frame(frame, ctx)
        engine_right = outcome is not None and outcome.evidence.cfa == caller_sp \
            and outcome.registers.get(arch.pc) == ra
        record = results.setdefault(address, [True, True, function, decoded.mode])
        record[0] = record[0] and row_right
        record[1] = record[1] and engine_right
        return False

    assert not em.run(on_instruction), "the run did not return to the sentinel"
    return results


def _classify(em, results):
    """{pc: "prologue" | "epilogue" | "other"} for every pc whose row is wrong.

    Per function, in address order of its executed instructions: the
    prologue is the run of wrong ones from its entry; an epilogue is a run
    of wrong ones ending at a return instruction."""
    by_function = defaultdict(list)
    for pc, (right, _, function, _) in results.items():
        by_function[function].append((pc, right))
    size = 1 if em.arch_key == "x86_64" else 4
    kinds = {}
    for function, items in by_function.items():
        items.sort()
        if items[0][0] == em.address_of[function]:
            for pc, right in items:
                if right:
                    break
                kinds[pc] = "prologue"
        for i, (pc, _) in enumerate(items):
            if em.is_return(pc, size):
                for back_pc, right in reversed(items[:i + 1]):
                    if right or back_pc in kinds:
                        break
                    kinds[back_pc] = "epilogue"
        for pc, right in items:
            if not right:
                kinds.setdefault(pc, "other")
    return kinds


@pytest.mark.parametrize("arch,flags", BUILDS, ids=build_id)
def test_every_instruction_where_compact_is_right_and_wrong(emulations, arch, flags):
    em = emulations(arch, flags)
    results = _measure(em)
    kinds = _classify(em, results)
    size = 1 if arch == "x86_64" else 4
    total = len(results)
    row_right = sum(1 for r in results.values() if r[0])
    engine_right = sum(1 for r in results.values() if r[1])
    wrong = defaultdict(int)
    for pc, kind in kinds.items():
        wrong[kind, results[pc][3]] += 1
    per_mode = defaultdict(lambda: [0, 0, 0])
    for row_ok, engine_ok, _, mode in results.values():
        counts = per_mode["DWARF" if mode == "DWARF" else "compact"]
        counts[0] += 1
        counts[1] += row_ok
        counts[2] += engine_ok
    print("\n%s %s: %d instructions, row right %d (%.0f%%), engine right %d (%.0f%%); "
          "[total, row right, engine right] by kind %s; wrong: %s" % (
              arch, flags, total, row_right, 100.0 * row_right / total, engine_right,
              100.0 * engine_right / total, dict(per_mode), dict(sorted(wrong.items()))))
    # Wrong only in prologues and epilogues.
    assert not [hex(pc) for pc, kind in kinds.items() if kind == "other"]
    for pc, (row_ok, engine_ok, function, mode) in results.items():
        # The engine is never worse than the row, and its entry and return
        # rules are exact for the compact modes.
        assert engine_ok or not row_ok, (function, hex(pc))
        if em.is_return(pc, size) or (mode != "DWARF" and pc == em.address_of[function]):
            assert engine_ok, (function, hex(pc), mode)
        # x86_64 CFI from clang is exact everywhere, epilogues included.
        if mode == "DWARF" and arch == "x86_64":
            assert row_ok, (function, hex(pc))
    # Most instructions are in bodies: the figures in the docstring.
    assert row_right >= 0.7 * total and engine_right >= 0.8 * total
