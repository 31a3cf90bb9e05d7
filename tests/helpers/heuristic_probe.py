"""Runs inside GDB (a "py" action of gdb_driver.py): the modelled answer of GDB's own heuristic
unwinder (plugin.debugger_heuristic.modelled_answer) for each of GDB's frames that no table covers,
beside the caller GDB itself found. The plugin's unwinder must be disabled first."""

import gdb

from gdb_unwinder.native import innermost_registers
from plugin.engine import UnwindContext
from plugin.debugger_heuristic import modelled_answer
from plugin.model.evidence import Frame
from plugin.strategies.cfi import CfiTables


def compare(limit=32):
    """[{level, pc, gdb: [pc, sp] of GDB's caller, model: [pc, sp] or None, why}] for GDB's normal frames
    whose lookup pc no CFI covers and whose caller GDB found."""
    state = gdb._unwind_plugin_state
    arch = state.refresh_arch()
    inferior = state.inferior()
    ctx = UnwindContext(inferior.target, inferior.modules, ("cfi",))
    out = []
    frame, level = gdb.newest_frame(), 0         # GDB 10's frames have no level()
    while frame is not None and level < limit:
        older = frame.older()
        if older is None:
            break
        if frame.type() == gdb.NORMAL_FRAME:
            registers, exact, _ = innermost_registers(arch, frame)
            mine = Frame(level=level, pc=frame.pc(), registers=registers, method="gdb", exact_pc=exact)
            lookup = ctx.lookup_pc(mine)
            module = ctx.modules.find(lookup)
            covered = module is not None and CfiTables.of(module, ctx.target).lookup(lookup) is not None
            if not covered:
                found = modelled_answer(mine, ctx)
                model = None if found is None else [found.registers.get(arch.pc), found.registers.get(arch.sp)]
                out.append({"level": level, "pc": frame.pc(), "gdb": [older.pc(), int(older.read_register("sp"))],
                            "model": model, "why": None if found is None else found.evidence.found_by})
        frame, level = older, level + 1
    return out
