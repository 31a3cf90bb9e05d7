"""Evidence -> text for people and JSON for scripts.

Both debuggers' commands and the offline command render through here, so
GDB and LLDB print the same words and the same JSON fields. The JSON field
names are a contract (documented in README.md): add, do not rename.
"""
from __future__ import annotations

import re

from plugin.model.evidence import VirtualKind
from plugin.model.outcome import AttemptStatus
from plugin.model.stops import describe
from plugin.render.expression import row_order, row_rules
from plugin.render.style import Styled, plain, visible_length
from plugin.settings import TRUST_WORDS


JSON_VERSION = 1    # the JSON contract's version: bumped only when a field is renamed or removed


def hexa(value):
    return None if value is None else "0x%x" % value


def found_by(frame):
    if frame.evidence is None:
        return "context" if frame.method == "context" else frame.method
    return frame.evidence.found_by


FRAME_NUMBERS = ("level", "pc", "cfa", "sp")     # frame_json's first fields: numbers (or null), in this order


def frame_numbers(frame, arch) -> tuple:
    """The values of FRAME_NUMBERS for frame."""
    return frame.level, frame.pc, frame.cfa, frame.registers.get(arch.sp)


def frame_json(frame, arch, detail=False):
    out = dict(zip(FRAME_NUMBERS, frame_numbers(frame, arch)))
    out.update({
        "method": frame.method,
        "function": frame.function,
        "module": frame.module,
        "found_by": found_by(frame),
        "trust": TRUST_WORDS.get(frame.method, frame.method),
        "signal_frame": frame.signal_frame,
    })
    if frame.native is not None:
        out["native"] = frame.native
    out["inline_frames"] = [virtual_json(v) for v in frame.inline_frames]
    out["tail_calls"] = [virtual_json(v) for v in frame.tail_calls]
    if frame.claimed:
        out["claimed"] = frame.claimed
    if detail:
        out["registers"] = {arch.name_of(n): v for n, v in sorted(frame.registers.items())}
        out["evidence"] = evidence_json(frame.evidence)
        out["attempts"] = [attempt_json(a) for a in frame.attempts]
    return out


def virtual_json(virtual):
    return {"level": virtual.level, "kind": virtual.kind.value, "pc": virtual.pc, "function": virtual.function}


def evidence_json(ev):
    if ev is None:
        return None
    return {
        "source": ev.source,
        "found_by": ev.found_by,
        "lookup_pc": ev.lookup_pc,
        "module": ev.module,
        "section": ev.section,
        "section_address": ev.section_address,
        "entry": ev.entry,
        "row": ev.row,
        "rule": ev.row_json,
        "cfa": ev.cfa,
        "reads": [{"what": r.what, "address": r.address, "size": r.size, "value": r.value}
                  for r in ev.reads],
        "recovered": ev.recovered,
        "notes": ev.notes,
    }


def attempt_json(attempt):
    return {"source": attempt.source, "outcome": attempt.outcome, "reason": attempt.reason}


def backtrace_json(bt, arch, detail=False):
    return {
        "version": JSON_VERSION,
        "frames": [frame_json(f, arch, detail) for f in bt.frames],
        "stop_reason": bt.stop_reason,
        "stop_detail": bt.stop_detail,
        "stop_attempts": [attempt_json(a) for a in bt.attempts],
    }


def frame_line(frame, width=16, style=plain):
    where = style(Styled.FUNCTION, frame.function or "??")
    line = "#%-3d %s in %s" % (frame.level, style(Styled.ADDRESS, "0x%0*x" % (width, frame.pc)), where)
    if frame.module:
        line += " from %s" % style(Styled.FILE, frame.module)
    line += "  [found by: %s]" % found_by(frame)
    if frame.signal_frame:
        line += " <signal handler called>"
    return line


def virtual_line(virtual, frame, width=16, style=plain):
    """`#0   0x... in helper from demo  [inlined into #1 outer]`: a level with no frame of its own."""
    line = "#%-3d %s in %s" % (virtual.level, style(Styled.ADDRESS, "0x%0*x" % (width, virtual.pc)),
                               style(Styled.FUNCTION, virtual.function or "??"))
    module = virtual.module if virtual.kind == VirtualKind.TAIL_CALL else frame.module
    if module:
        line += " from %s" % style(Styled.FILE, module)
    tail = "" if virtual.kind == VirtualKind.INLINE else "tail call: "
    return line + "  [%s%s]" % (tail, shares_text(virtual, frame))


def shares_text(virtual, frame):
    """Whose physical frame a virtual frame shares, in words."""
    owner = "#%d %s" % (frame.level, frame.function or "??")
    if virtual.kind == VirtualKind.INLINE:
        return "inlined into %s, runs in its frame" % owner
    if virtual in frame.inline_frames:      # numbered before its caller: a walk began at it
        return "no frame of its own, its callee's frame took its place; its caller is %s" % owner
    return "no frame of its own, %s's frame took its place" % owner


def levels_of(frame):
    """(level, VirtualFrame or None for the physical frame) in the debugger's order."""
    return ([(v.level, v) for v in frame.inline_frames] + [(frame.level, None)]
            + [(v.level, v) for v in frame.tail_calls])


def backtrace_text(bt, arch, style=plain):
    width = 2 * arch.address_size
    lines = []
    for frame in bt.frames:
        for level, virtual in levels_of(frame):
            if bt.shown is not None and level not in bt.shown:
                continue
            lines.append(frame_line(frame, width, style) if virtual is None
                         else virtual_line(virtual, frame, width, style))
    # The reason's name first (scripts match it), then what happened in words.
    lines.append(stop_text(bt))
    return "\n".join(lines)


def _where(frame, style=plain):
    """`by_value in demo`, `?? in libc.so.6`."""
    text = style(Styled.FUNCTION, frame.function or "??")
    return text + (" in %s" % style(Styled.FILE, frame.module) if frame.module else "")


def explain_text(frame, arch, callee=None, verbose=False, width=None, style=plain):
    """How `frame` was recovered, top-down like a proof: where from, by which row, what was read.

    callee: the frame below (level - 1) the evidence was computed from, when
    known. verbose: also the raw DWARF operations of expressions. width: the
    terminal's width to wrap at (None: no wrapping).
    """
    ev = frame.evidence
    lines = []
    callee_level = callee.level if callee is not None else frame.level - 1
    if ev is None:
        lines.append("#%d %s: the innermost frame, registers from the debugger" % (frame.level, _where(frame, style)))
        lines.append("  pc = 0x%x, sp = %s" % (frame.pc, hexa(frame.registers.get(arch.sp))))
    else:
        below = "frame #%d" % callee_level
        if callee is not None:
            below += " (%s)" % ", ".join([style(Styled.FUNCTION, callee.function or "??")]
                                         + ([style(Styled.FILE, callee.module)] if callee.module else []))
        lines.append("#%d %s: recovered from %s by %s" % (frame.level, _where(frame, style), below, ev.found_by))
        lines.append("  trust: %s" % TRUST_WORDS.get(frame.method, frame.method))
        lines.append("  pc 0x%x%s" % (frame.pc, " <signal handler called>" if frame.signal_frame else ""))
        if ev.module:
            lines.append("  table: %s of %s at %s, looked up at 0x%x"
                         % (ev.section or ev.source, ev.module, hexa(ev.section_address), ev.lookup_pc))
        elif ev.section:        # no module's table: the stack itself, or a table only in memory
            lines.append("  read from: %s at %s, looked up at 0x%x" % (ev.section, hexa(ev.section_address),
                                                                    ev.lookup_pc))
        else:
            lines.append("  looked up at 0x%x" % ev.lookup_pc)
        if ev.entry:
            lines.append("  entry: " + _entry_text(ev.entry))
        lines.extend(_row_lines(ev, arch, callee_level, verbose))
        lines.extend(_read_lines(ev, arch))
        for note in ev.notes:
            lines.append("  note: " + note)
    lines.extend(_attempt_lines(frame.attempts, "  tried first: "))
    if frame.native is not None:
        lines.append("  verdict: the debugger's own unwinder " + native_text(frame.native))
        if frame.native.get("gdb_bt"):
            lines.append("  GDB's bt: " + frame.native["gdb_bt"])
        if frame.native.get("gdb_id"):
            lines.append("  GDB's frame id: " + frame.native["gdb_id"])
    if frame.claimed:
        lines.append("  " + frame.claimed)
    return "\n".join(wrap(line, width) for line in lines)


def _row_lines(ev, arch, callee_level, verbose):
    row = ev.rule
    if row is None:
        return []
    span = "from 0x%x" % row.address + (" to 0x%x" % row.end if row.end is not None else "")
    # a rule that is no CFI-like row (an ORC entry) says its own lines
    rules = row.rule_lines() if hasattr(row, "rule_lines") else row_rules(row, arch, verbose)
    cfa = rules[0]
    if ev.cfa is not None:
        cfa += " = 0x%x (frame #%d's CFA)" % (ev.cfa, callee_level)
    return ["  row in force %s:" % span, "    " + cfa, "    " + "   ".join(rules[1:])] if rules[1:] \
        else ["  row in force %s:" % span, "    " + cfa]


def _read_lines(ev, arch):
    if not ev.reads:
        return []
    order = {}
    if ev.rule is not None:
        order = {arch.name_of(n): i for i, n in enumerate(row_order(ev.rule, arch))}
    # The CFA's own reads first (it is computed first), then the row's order; unknown names keep their place.
    reads = sorted(ev.reads, key=lambda r: -1 if r.what.startswith("CFA") else order.get(r.what, len(order)))
    lines = ["  %d value%s read, in the row's order:" % (len(reads), "" if len(reads) == 1 else "s")]
    for read in reads:
        lines.append("    %s = 0x%x from [0x%x] (%d bytes)" % (read.what, read.value, read.address, read.size))
    return lines


def _attempt_lines(attempts, label):
    """Failed and rejected sources one per line; sources with nothing for the frame named once."""
    lines = []
    absent = []
    for attempt in attempts:
        if attempt.outcome == AttemptStatus.NOT_APPLICABLE:
            absent.append(attempt.source)
        else:
            lines.append("%s%s %s: %s" % (label, attempt.source, attempt.outcome, attempt.reason))
    if absent:
        lines.append("%sno entry for this pc in %s" % (label, ", ".join(absent)))
    return lines


def stop_text(bt):
    """`Backtrace stopped: REASON: the one reason that applied`, or `REASON (what it means)`
    followed by what each source tried, one per line."""
    if bt.stop_detail and not bt.attempts:
        return "Backtrace stopped: %s: %s" % (bt.stop_reason, bt.stop_detail)
    head = "Backtrace stopped: %s (%s)" % (bt.stop_reason, describe(bt.stop_reason))
    return "\n".join([head] + _attempt_lines(bt.attempts, "  "))


def wrap(line, width):
    """Wrap one line at `width` columns, continuing under its own indentation plus four.

    Breaks only at spaces and never inside a word; colour escapes take no
    columns. For plain text this is textwrap.fill(break_long_words=False,
    break_on_hyphens=False).
    """
    if not width or visible_length(line) <= width:
        return line
    lead = len(line) - len(line.lstrip())
    indent = " " * (lead + 4)
    lines, current, pending = [], line[:lead], ""
    for token in re.findall(r"\S+| +", line[lead:]):
        if token.startswith(" "):
            pending += token
            continue
        started = current.strip() != ""
        if started and visible_length(current + pending + token) > width:
            lines.append(current)
            current, pending = indent + token, ""
        else:
            current, pending = current + pending + token, ""
    lines.append(current)
    return "\n".join(lines)


def explain_frames_text(frames, chosen, arch, verbose=False, width=None, style=plain):
    """explain_text for each of `chosen` (frames, or (level, frame) pairs), each with its callee from
    `frames`. A level that is an inline or tail-call frame says whose physical frame it shares, then
    explains that one."""
    callees = {id(f): c for c, f in zip([None] + frames[:-1], frames)}
    texts, explained = [], set()
    for item in chosen:
        level, frame = item if isinstance(item, tuple) else (item.level, item)
        virtual = next((v for at, v in levels_of(frame) if at == level), None)
        if virtual is not None:
            texts.append("\n".join(wrap(line, width) for line in virtual_text(virtual, frame, arch, style)))
        if id(frame) not in explained:
            explained.add(id(frame))
            texts.append(explain_text(frame, arch, callees.get(id(frame)), verbose, width, style))
    return "\n\n".join(texts)


def virtual_text(virtual, frame, arch, style=plain):
    kind = "an inline frame" if virtual.kind == VirtualKind.INLINE else "a tail-call frame"
    name = style(Styled.FUNCTION, virtual.function or "??")
    return ["#%d %s: %s, made by no unwind step: %s" % (virtual.level, name, kind, shares_text(virtual, frame)),
            "  pc 0x%x, sp %s, the registers of frame #%d" % (virtual.pc, hexa(frame.registers.get(arch.sp)),
                                                              frame.level)]


def native_text(native):
    if not native.get("available", True):
        return "has no frame at this level"
    verdict = "agrees" if native.get("agrees") else "DISAGREES"
    text = "%s (pc %s, sp %s" % (verdict, hexa(native.get("pc")), hexa(native.get("sp")))
    if native.get("function"):
        text += ", %s" % native["function"]
    text += ")"
    if native.get("note"):
        text += ": " + native["note"]
    return text


def _entry_text(entry):
    """`fde offset 0x32c0, cie offset 0x0, start 0x..., found via .eh_frame_hdr binary search`."""
    parts = []
    for key, value in entry.items():
        if key in _SHOWN_IN_ROW:
            continue
        name = key.replace("_", " ")
        if isinstance(value, bool):
            if value:
                parts.append(name)      # "signal frame"; nothing when it is not one
        elif isinstance(value, int):
            parts.append("%s 0x%x" % (name, value))
        elif isinstance(value, (list, dict)):
            continue        # structured detail (SFrame data words, rules): the strategy adds notes for it
        elif value not in (None, ""):
            parts.append("%s %s" % (name, value))
    return ", ".join(parts)


_SHOWN_IN_ROW = ("row_start", "row_end")     # the row line says where it applies
