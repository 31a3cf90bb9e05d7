"""Evidence is data: what each unwind step looked at, read, tried and decided.

Strategies fill these records; plugin/render/explain.py turns them into text for
people and JSON for scripts. Nothing here formats for a particular debugger.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from plugin.model.outcome import AttemptStatus, FailureKind
from plugin.model.vocabulary import Vocabulary


@dataclass
class Read:
    """One value read from the debuggee: what it is, where it came from."""
    what: str
    address: int
    size: int
    value: int


@dataclass
class Attempt:
    """A source that was tried for a frame and did not give the answer."""
    source: str
    outcome: AttemptStatus      # not applicable, failed, rejected or skipped
    reason: str
    kind: Optional[FailureKind] = None      # what kind of failure (not in the JSON)


@dataclass
class StepEvidence:
    """How one caller frame was recovered from its callee."""
    source: str
    found_by: str                       # e.g. ".eh_frame CFI"
    lookup_pc: int
    module: str = None
    section: str = None
    section_address: int = None
    entry: dict = field(default_factory=dict)     # FDE/CIE offsets, ranges, opcode...
    rule: object = None                 # the plugin.model.rules.Row applied
    arch: object = None
    cfa: int = None
    reads: list = field(default_factory=list)
    caller_registers: dict = field(default_factory=dict)   # DWARF number -> value
    notes: list = field(default_factory=list)
    stack_switch: bool = False          # the rule moves to another stack (the kernel's IRQ stack, a pt_regs)

    # Rendering is deferred: GDB's unwinder makes one of these per frame and
    # most are never shown.
    @property
    def row(self):
        """Readable rule, "CFA=rsp+16 => rip=[CFA-8]"."""
        return None if self.rule is None else self.rule.text(self.arch)

    @property
    def row_json(self):
        return None if self.rule is None else self.rule.to_json(self.arch)

    @property
    def recovered(self):
        """Register name -> value of the caller, as recovered."""
        return {self.arch.name_of(n): v for n, v in sorted(self.caller_registers.items())}


class VirtualKind(Vocabulary):
    """Frames the debugger numbers that have no stack frame of their own: no unwind step made them."""
    INLINE = ("inline", "inlined: it runs in the physical frame it is inlined into")
    TAIL_CALL = ("tail-call", "left by a jump (a tail call): its own frame was reused by its callee")


@dataclass
class VirtualFrame:
    """An inline or tail-call frame at a debugger level, attached to the physical frame it shares."""
    level: int
    kind: VirtualKind
    pc: int
    function: str = None
    module: str = None       # a tail call's own module (an inline frame's is its physical frame's)


@dataclass
class Frame:
    level: int
    pc: int
    registers: dict                      # DWARF number -> value
    method: str                          # "context" or the source that recovered it
    cfa: int = None                      # this frame's CFA (its caller's sp), once known
    function: str = None
    function_start: int = None
    module: str = None
    signal_frame: bool = False           # this frame is a signal trampoline
    exact_pc: bool = False               # pc is not a return address (innermost, or interrupted by a signal)
    evidence: StepEvidence = None        # how this frame was recovered (None for level 0)
    attempts: list = field(default_factory=list)   # what was tried first and rejected
    native: dict = None                  # the debugger's own view, filled by adapters
    inline_frames: list = field(default_factory=list)   # VirtualFrames numbered before this one, newest first
    tail_calls: list = field(default_factory=list)      # VirtualFrames numbered after it, sharing its stack frame
    claimed: str = None                  # the adapter's note on what its unwinder API loses for this frame

    @property
    def levels(self):
        """The debugger levels this physical frame spans: its inline frames, itself, its tail calls."""
        return range(self.level - len(self.inline_frames), self.level + len(self.tail_calls) + 1)

    @property
    def trust(self):
        return self.method


@dataclass
class Backtrace:
    frames: list
    stop_reason: str                     # a plugin.model.stops.StopReason
    stop_detail: str = ""
    attempts: list = field(default_factory=list)   # what was tried for the frame that failed
    shown: range = None                  # the debugger levels asked for (None: every level walked)
