"""LLDB's own view of the stack: physical frames, and the registers of one frame.

LLDB 16 lists more frames than there are on the stack:

- an inlined call is a frame of its own (SBFrame.IsInlined()), followed by
  the concrete frame it was inlined into. They share one register context,
  but only the innermost frame of such a group reports the real pc: LLDB
  gives the concrete frame the pc of the inlined call site instead (for
  example msort_with_tmp in glibc's qsort: 0x...49a4 on the inlined frame,
  0x...4996 on the concrete one). A physical frame is therefore the whole
  group, with the pc of its first frame.
  The flag alone does not make a group: LLDB (16, 19 and 22 alike) also
  flags frames inlined that have no concrete frame after them (glibc's
  _IO_new_file_xsputn stopped in `write` under fwrite: flagged inlined,
  but its caller _IO_fwrite has another CFA and sp). Frames share a
  physical frame only when they share its stack: the same CFA and sp (the
  stack id LLDB itself keys frames by). An inlined frame whose next frame
  is on another stack is a physical frame of its own.
- a tail call is shown as an artificial frame (SBFrame.IsArtificial(),
  "[artificial]" in `thread backtrace`) rebuilt from DW_TAG_call_site
  information; it has no frame on the stack, so it is left out (GDB's
  TAILCALL_FRAME is left out the same way).

The plugin recovers physical frames; levels.py numbers them as LLDB does
(inline and artificial frames included), from the groups physical() yields.
"""

import lldb


class Physical:
    """One physical frame: `first` holds the real pc and registers, `concrete` the function.

    indices: LLDB's frame indices of the group (its inline frames, then the concrete frame);
    tails: the indices of the artificial (tail-call) frames LLDB lists right after it.
    """

    def __init__(self, first, concrete, indices, tails=()):
        self.first = first
        self.concrete = concrete
        self.indices = indices
        self.tails = list(tails)

    def entry(self):
        return {"pc": self.first.GetPC(), "sp": self.first.GetSP(),
                "function": self.concrete.GetFunctionName()}


def _stack_id(frame):
    """What LLDB's frames of one physical frame share: (CFA, sp)."""
    return frame.GetCFA(), frame.GetSP()


def _next_real(thread, index):
    """(index, SBFrame, [indices of the artificial frames skipped]) of the first frame from `index`
    on that is not artificial, or (None, None, skipped)."""
    skipped = []
    while True:
        frame = thread.GetFrameAtIndex(index)
        if not frame.IsValid():
            return None, None, skipped
        if not frame.IsArtificial():
            return index, frame, skipped
        skipped.append(index)
        index += 1


def physical(thread, last_index=None):
    """Yield LLDB's physical frames innermost first (up to the one holding frame index last_index).

    Artificial frames before the first physical frame (none, as LLDB lists them) are left out;
    those after a physical frame are its tails."""
    group, tails = [], []
    index, frame, _ = _next_real(thread, 0)
    while frame is not None:
        group.append(index)
        next_index, next_frame, skipped = _next_real(thread, index + 1)
        tails += skipped
        joins = (frame.IsInlined() and next_frame is not None
                 and _stack_id(next_frame) == _stack_id(frame))
        if not joins:
            yield Physical(thread.GetFrameAtIndex(group[0]), frame, group, tails)
            if last_index is not None and index >= last_index:
                break
            group, tails = [], []
        index, frame = next_index, next_frame


def physical_frames(thread, limit):
    """[{pc, sp, function}] of LLDB's physical frames, innermost first, at most `limit`.

    Frames are fetched one index at a time so a deep stack is unwound by
    LLDB only as far as asked.
    """
    out = []
    for frame in physical(thread):
        if len(out) >= limit:
            break
        out.append(frame.entry())
    return out


def physical_frame(thread, frame):
    """(Physical holding SBFrame `frame`, its physical level, the Physical just newer or None).

    A selected artificial (tail-call) frame has no frame of its own; the
    physical frame after it is taken.
    """
    newer = None
    wanted = frame.GetFrameID()
    for level, candidate in enumerate(physical(thread, wanted)):
        if candidate.indices[-1] >= wanted:
            return candidate, level, newer
        newer = candidate
    raise ValueError("LLDB has no physical frame at or above frame #%d" % wanted)


def registers(frame, arch):
    """{DWARF number: value} of an SBFrame; registers LLDB cannot recover are left out."""
    out = {}
    names_by_number = {}
    for name, number in arch.aliases.items():       # aarch64: LLDB calls x29/x30 fp/lr
        names_by_number.setdefault(number, []).append(name)
    for number, name in arch.registers.items():
        for candidate in [name] + names_by_number.get(number, []):
            value = frame.FindRegister(candidate)
            if not value.IsValid():
                continue
            if value.GetByteSize() > arch.address_size:
                break       # vector registers: not needed to unwind, not an integer
            error = lldb.SBError()
            number_value = value.GetValueAsUnsigned(error, 0)
            if error.Success():
                out[number] = number_value & arch.mask
            break
    out[arch.pc] = frame.GetPC()
    return out
