"""The `unwind` commands' results, computed once for both debuggers.

Each function returns (json_object, text). The GDB and LLDB adapters only
gather registers and native frames, call these, and print one of the two.
"""

from __future__ import annotations

from plugin.cache import caches_of, summed
from plugin.validate import compare as comparing
from plugin.render import explain, tables
from plugin.render.style import Styled, plain
from plugin.engine import UnwindContext, unwind
from plugin.model.stops import StopReason
from plugin.model.evidence import VirtualKind
from plugin.strategies.cfi import CfiTables
from plugin.strategies.orc import summary as orc_summary


def backtrace(state_target, modules, registers, exact_pc, sources, max_frames, first_level=0, limit=None,
              step=None, place=None, until_level=None):
    """The plugin's walk from `registers`, at the debugger's levels.

    place(frame) -> its last level: the adapter numbers each frame as its
    debugger does (inline and tail-call frames included) as the walk reaches
    it; without it levels count physical frames. limit N > 0: the walk stops
    at the frame after level first_level + N - 1 (so the last level shown
    has its CFA), and only the levels asked for are shown; -N: the
    outermost N levels. until_level: the walk stops
    at the first frame whose levels lie past it (the frame after it, which
    says whether the walk ends there). step: the adapter's fast path
    (engine.unwind's step).
    """
    place = place or (lambda frame: frame.level)
    if limit is not None and limit > 0:
        until_level = first_level + limit - 1

    def until(frame):
        # The walk goes one frame past the last level wanted: unwinding that
        # frame is what computes its CFA (and says whether the walk ends there).
        place(frame)
        _name_tail_call_modules(frame, modules)
        return until_level is not None and frame.levels[0] > until_level
    bt = unwind(state_target, registers, sources=sources, max_frames=max_frames, modules=modules,
                exact_pc=exact_pc, first_level=first_level, until=until, step=step)
    if bt.stop_reason == StopReason.LIMIT:
        bt.stop_detail = "stopped after %d frame%s as asked" % (limit, "" if limit == 1 else "s") \
            if limit is not None else "stopped after the frame asked for"
    if limit is not None and limit > 0:
        bt.shown = range(first_level, first_level + limit)
    elif limit is not None and limit < 0:
        end = bt.frames[-1].levels[-1] + 1      # the outermost -limit levels; the stop reason is the walk's
        bt.shown = range(max(end + limit, first_level), end)
    if bt.shown is not None:
        bt.frames = [f for f in bt.frames if f.levels[-1] >= bt.shown.start and f.levels[0] < bt.shown.stop]
    return bt


def _name_tail_call_modules(frame, modules) -> None:
    """A tail-call frame's function may be in another module than the frame that took its place
    (a program's function that tail-called qsort): each is named after the module holding its pc."""
    for virtual in frame.tail_calls + frame.inline_frames:
        if virtual.kind == VirtualKind.TAIL_CALL and modules is not None:
            module = modules.find(virtual.pc)
            virtual.module = module.name if module is not None else None


def limited(bt, limit=None):
    """bt cut to the innermost `limit` frames (limit > 0), the outermost -limit (limit < 0), or whole."""
    if limit is not None and limit < 0:
        bt.frames = bt.frames[limit:]           # the outermost -limit frames; the stop reason is the walk's
    elif limit is not None and len(bt.frames) > limit:
        bt.frames = bt.frames[:limit]
        bt.stop_reason, bt.stop_detail = "limit", "stopped after %d frame%s as asked" % (limit, "" if limit == 1 else "s")
    return bt


def backtrace_report(bt, arch, style=plain):
    return explain.backtrace_json(bt, arch), explain.backtrace_text(bt, arch, style)


def attach_native(bt, native, ctx):
    """Mark each of our frames with the debugger's frame it was paired with (comparing.compare)."""
    rows = comparing.compare(bt.frames, native, ctx)
    for frame, row in zip(bt.frames, [row for row in rows if row["plugin"] is not None]):
        theirs = row["native"]
        frame.native = {"available": theirs is not None, "agrees": row["agrees"],
                        "note": "" if row["agrees"] else row["verdict"]}
        if theirs is not None:
            frame.native.update({"pc": theirs["pc"], "sp": theirs.get("sp"),
                                 "function": theirs.get("function")})
    return rows


def explain_report(bt, arch, which, verbose=False, width=None, style=plain):
    """which: a level (int) or "all". verbose: raw DWARF operations too; width: wrap text there."""
    if which == "all":
        chosen = [(level, f) for f in bt.frames for level, _ in explain.levels_of(f)]
    else:
        chosen = [(which, f) for f in bt.frames if which in f.levels]
        if not chosen:
            raise ValueError("no frame at level %d: the plugin's walk has levels %d to %d (%s)"
                             % (which, bt.frames[0].levels[0], bt.frames[-1].levels[-1], bt.stop_reason))
    frames = []
    for _, frame in chosen:
        if not frames or frames[-1] is not frame:
            frames.append(frame)
    data = {"version": explain.JSON_VERSION, "frames": [explain.frame_json(f, arch, detail=True) for f in frames],
            "stop_reason": bt.stop_reason, "stop_detail": bt.stop_detail}
    text = explain.explain_frames_text(bt.frames, chosen, arch, verbose, width, style)
    if which == "all" or frames[-1] is bt.frames[-1]:
        text += "\n\n" + "\n".join(explain.wrap(line, width) for line in explain.stop_text(bt).split("\n"))
    return data, text


def compare_report(bt, native, ctx, style=plain):
    """style: how pcs and function names are coloured (render.style); columns are padded as plain text."""
    rows = comparing.compare(bt.frames, native, ctx)
    data = {"frames": rows, "agree": all(r["agrees"] for r in rows), "summary": comparing.summary(rows),
            "stop_reason": bt.stop_reason}
    width = 2 * ctx.arch.address_size + 2
    names = [_function_of(row) for row in rows]
    named = min(max([len(n) for n in names] + [len("function")]), FUNCTION_COLUMN)
    lines = ["%-5s %-*s %-*s %-*s    %s" % ("level", width, "plugin pc", width, "native pc", named, "function",
                                          "verdict")]
    for row, name in zip(rows, names):
        ours = row["plugin"]["pc"] if row["plugin"] else None
        theirs = row["native"]["pc"] if row["native"] else None
        mark = "  " if row["agrees"] else "!="
        lines.append("#%-4d %s %s %s %s %s" % (
            row["level"], _cell(style, Styled.ADDRESS, explain.hexa(ours), width),
            _cell(style, Styled.ADDRESS, explain.hexa(theirs), width),
            _cell(style, Styled.FUNCTION, name, named), mark, row["verdict"]))
    lines.append(data["summary"])
    return data, "\n".join(lines)


FUNCTION_COLUMN = 32        # function names longer than this push the verdict right on their own line


def _function_of(row):
    """The function a compare row is in: the plugin's name, else the debugger's."""
    for side in ("plugin", "native"):
        if row[side] and row[side].get("function"):
            return row[side]["function"]
    return ""


def _cell(style, kind, text, width):
    """text styled, padded to width by its plain length (escapes take no columns); "-" when absent."""
    if not text:
        return "-".ljust(width)
    return style(kind, text) + " " * (width - len(text))


def cache_report(holders, modules):
    """`unwind cache`: holders is [(what holds them, [objects whose fields hold caches])]; then
    the caches of the tables of `modules` (a ModuleMap), each kind summed over the modules."""
    groups = [(group, summed(caches_of(owners))) for group, owners in holders]
    tables = [tables for module in modules.modules for tables in module.cache.values()]
    groups.append(("the tables of %d modules" % len(modules.modules), summed(caches_of(tables))))
    data = {"caches": []}
    lines = []
    for group, stats in groups:
        lines.append("%s:" % group)
        for one in stats:
            data["caches"].append(dict(one.as_json(), group=group))
            lines.append("  " + one.text())
        if not stats:
            lines.append("  none yet")
    return data, "\n".join(lines)


def modules_report(modules):
    data = {"modules": [], "unreadable": []}
    lines = []
    for module in modules.all():
        # Discovery's tables, then where the CFI source found .eh_frame/.debug_frame.
        found = {**module.tables, **CfiTables.of(module, modules.target).located()}
        entry = {"name": module.name, "path": module.path, "base": module.header_address,
                 "load_bias": module.load_bias, "arch": module.arch.name, "format": module.format,
                 "build_id": module.build_id, "uuid": module.uuid,
                 "segments": [{"start": s.start, "end": s.end, "executable": s.executable}
                              for s in module.segments],
                 "tables": {name: {"address": t.address, "size": t.size, "found_by": t.found_by,
                                   "in_memory": t.in_memory} for name, t in found.items()}}
        data["modules"].append(entry)
        lines.append("%s at 0x%x (%s)" % (module.name, module.header_address, module.path or "memory only"))
        orc_table = orc_summary(module, modules.target)
        if orc_table is not None:       # the Linux kernel (plugin.modules.kernel)
            entry["orc"] = orc_table
            lines.append("    ORC: " + ("cannot read: %s" % orc_table["problem"] if "problem" in orc_table else
                                        "%d entries, layout %s (chosen by the %s), kernel %s"
                                        % (orc_table["entries"], orc_table["layout"], orc_table["layout_by"],
                                           orc_table["release"] or "release unknown")))
            entry["problems"] = list(module.problems)
            lines.extend("    note: %s" % problem for problem in module.problems)
        for name, t in sorted(found.items()):
            lines.append("    %-14s 0x%x size 0x%x, found by %s%s" % (
                name, t.address, t.size, t.found_by, "" if t.in_memory else " (read from disk)"))
        if not found:
            lines.append("    no unwind tables")
    for ref, reason in modules.failed:
        data["unreadable"].append({"name": ref.name, "base": ref.header_address, "reason": reason})
        lines.append("%s at 0x%x: cannot read: %s" % (ref.name, ref.header_address, reason))
    return data, "\n".join(lines)


def tables_report(target, modules, address, style=plain):
    if address is not None and address < 0:
        raise ValueError("%d is not an address (it is negative); give one such as 0x401000 or a function's name"
                         % address)
    result = tables.collect(target, modules, address)
    return result, tables.text(result, style)


def context(target, modules, sources):
    return UnwindContext(target, modules, sources)
