"""Evidence -> text for people and JSON for scripts.

Both debuggers' commands and the offline command render through here, so
GDB and LLDB print the same words and the same JSON fields. The JSON field
names are a contract (documented in README.md): add, do not rename.
"""

from plugin.model.stops import describe
from plugin.settings import TRUST_WORDS


def hexa(value):
    return None if value is None else "0x%x" % value


def found_by(frame):
    if frame.evidence is None:
        return "context" if frame.method == "context" else frame.method
    return frame.evidence.found_by


def frame_json(frame, arch, detail=False):
    out = {
        "level": frame.level,
        "pc": frame.pc,
        "cfa": frame.cfa,
        "sp": frame.registers.get(arch.sp),
        "method": frame.method,
        "function": frame.function,
        "module": frame.module,
        "found_by": found_by(frame),
        "trust": TRUST_WORDS.get(frame.method, frame.method),
        "signal_frame": frame.signal_frame,
    }
    if frame.native is not None:
        out["native"] = frame.native
    if detail:
        out["registers"] = {arch.name_of(n): v for n, v in sorted(frame.registers.items())}
        out["evidence"] = evidence_json(frame.evidence)
        out["attempts"] = [attempt_json(a) for a in frame.attempts]
    return out


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
        "frames": [frame_json(f, arch, detail) for f in bt.frames],
        "stop_reason": bt.stop_reason,
        "stop_detail": bt.stop_detail,
        "stop_attempts": [attempt_json(a) for a in bt.attempts],
    }


def frame_line(frame, width=16):
    where = frame.function or "??"
    line = "#%-3d 0x%0*x in %s" % (frame.level, width, frame.pc, where)
    if frame.module:
        line += " from %s" % frame.module
    line += "  [found by: %s]" % found_by(frame)
    if frame.signal_frame:
        line += " <signal handler called>"
    return line


def backtrace_text(bt, arch):
    width = 2 * arch.address_size
    lines = [frame_line(f, width) for f in bt.frames]
    # The reason's name first (scripts match it), then what happened in words.
    lines.append("Backtrace stopped: %s (%s)" % (
        bt.stop_reason, bt.stop_detail or describe(bt.stop_reason)))
    return "\n".join(lines)


def explain_text(frame, arch):
    """Everything known about how `frame` was recovered, as an indented report."""
    lines = [frame_line(frame, 2 * arch.address_size)]
    lines.append("  trust: %s" % TRUST_WORDS.get(frame.method, frame.method))
    regs = frame.registers
    if frame.cfa is not None:
        lines.append("  CFA of this frame: 0x%x" % frame.cfa)
    for attempt in frame.attempts:
        lines.append("  tried %s first: %s (%s)" % (attempt.source, attempt.outcome, attempt.reason))
    ev = frame.evidence
    if ev is None:
        lines.append("  registers come from the debugger: pc=0x%x sp=%s" % (frame.pc, hexa(regs.get(arch.sp))))
    else:
        lines.append("  recovered by %s from frame #%d's registers; table looked up at 0x%x"
                     % (ev.found_by, frame.level - 1, ev.lookup_pc))
        if ev.module:
            lines.append("  module: %s, section %s at %s" % (ev.module, ev.section, hexa(ev.section_address)))
        if ev.entry:
            lines.append("  entry: " + _entry_text(ev.entry))
        if ev.row:
            lines.append("  row: " + ev.row)
        if ev.cfa is not None:
            lines.append("  CFA computed: 0x%x" % ev.cfa)
        for read in ev.reads:
            lines.append("  read %s = 0x%x from [0x%x] (%d bytes)" % (read.what, read.value, read.address, read.size))
        for note in ev.notes:
            lines.append("  note: " + note)
    if frame.native is not None:
        lines.append("  debugger's own unwinder: " + native_text(frame.native))
    return "\n".join(lines)


def native_text(native):
    if not native.get("available", True):
        return "no frame at this level"
    verdict = "agrees" if native.get("agrees") else "DISAGREES"
    text = "%s (pc %s, sp %s" % (verdict, hexa(native.get("pc")), hexa(native.get("sp")))
    if native.get("function"):
        text += ", %s" % native["function"]
    text += ")"
    if native.get("note"):
        text += ": " + native["note"]
    return text


def _entry_text(entry):
    parts = []
    for key, value in entry.items():
        if isinstance(value, int) and not isinstance(value, bool):
            parts.append("%s=0x%x" % (key, value))
        elif isinstance(value, (list, dict)):
            continue        # structured detail (SFrame data words, rules): the strategy adds notes for it
        elif value not in (None, ""):
            parts.append("%s=%s" % (key, value))
    return " ".join(parts)
