"""What a source answers for one frame: an Outcome, its status, and the kind of failure.

A strategy never raises: it returns an Outcome. One that fails says what
kind of failure it met (a FailureKind) plus a sentence for people; the
engine decides by the kind and only shows the sentence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from plugin.errors import MemoryReadError
from plugin.model.vocabulary import Vocabulary


class AttemptStatus(Vocabulary):
    """How a source's answer for a frame ended (Outcome.status, Attempt.outcome)."""
    RECOVERED = ("recovered", "the source recovered the caller (or found the outermost frame)")
    NOT_APPLICABLE = ("not applicable", "the source has nothing for this frame (no module, table or entry)")
    FAILED = ("failed", "the source covers the frame but could not recover the caller")
    REJECTED = ("rejected", "the source answered, but the engine's checks refused the answer")
    SKIPPED = ("skipped", "not asked: a table covering the frame failed a check, so the stack is not guessed past")


class FailureKind(Vocabulary):
    """Why a source did not give a caller (Outcome.kind, Attempt.kind)."""
    NO_MODULE = ("no-module", "no module contains the pc")
    NO_TABLE = ("no-table", "the module has no table of this source, or it could not be loaded")
    NO_ENTRY = ("no-entry", "the table has no entry (or no row) covering the pc")
    NOT_SUPPORTED = ("not-supported", "the source does not apply to this module, architecture or encoding")
    NO_FRAME_POINTER = ("no-frame-pointer", "the function keeps no frame pointer, or it is 0")
    UNKNOWN_REGISTER = ("unknown-register", "a register the rule needs has no known value")
    BAD_TABLE = ("bad-table", "the table entry or expression could not be decoded")
    UNREADABLE_MEMORY = ("unreadable-memory", "bytes the step needs (stack, table, code or file) cannot be read")
    MISALIGNED = ("misaligned", "the stack or frame pointer breaks the ABI's alignment")
    CFA_NOT_INCREASING = ("cfa-not-increasing", "the CFA or frame pointer is not above the callee's frame")
    RETURN_ADDRESS_NOT_CODE = ("return-address-not-code", "the recovered return address is not in executable memory")
    NOT_STACK_MEMORY = ("not-stack-memory", "the frame pointer points into read-only or executable memory, not a stack")
    NOT_AFTER_CALL = ("not-after-call", "the return address found does not follow a call instruction")
    NO_RETURN_ADDRESS = ("no-return-address", "no value for the return address: the rule gives none, or no stack word is one")
    UNDECIDED = ("undecided", "the instruction analysis cannot decide the frame at this pc")
    NOT_AT_CALL_SITE = ("not-at-call-site", "the table holds at call sites only, and the code shows the pc is in a "
                        "prologue or an epilogue")
    CANT_UNWIND = ("cant-unwind", "the table marks the function as not unwindable by exceptions "
                   "(EXIDX_CANTUNWIND): its code decides")
    INTERNAL_ERROR = ("internal-error", "the strategy raised an exception (a bug): recorded, and the walk goes on")


def error_kind(exc: BaseException) -> FailureKind:
    """The kind of a caught decoder error: unreadable memory when a read failed on the way, else a bad table.

    Decoders turn a failed read into a DecodeError raised while handling the
    MemoryReadError, so the exception chain (not the message) tells.
    """
    seen = exc
    while seen is not None:
        if isinstance(seen, (MemoryReadError, OSError)):
            return FailureKind.UNREADABLE_MEMORY
        seen = seen.__context__
    return FailureKind.BAD_TABLE


@dataclass
class Outcome:
    status: AttemptStatus
    source: str
    reason: str = ""
    registers: dict = None          # the caller's registers when recovered
    evidence: object = None         # StepEvidence, also for failures when there is some
    outermost: bool = False         # the table says this frame has no caller
    signal_frame: bool = False      # the frame just unwound is a signal trampoline
    kind: Optional[FailureKind] = None      # why not, when not recovered

    @classmethod
    def not_applicable(cls, source: str, reason: str, kind: Optional[FailureKind] = None) -> "Outcome":
        return cls(AttemptStatus.NOT_APPLICABLE, source, reason, kind=kind)

    @classmethod
    def failed(cls, source: str, reason: str, kind: FailureKind, evidence=None) -> "Outcome":
        return cls(AttemptStatus.FAILED, source, reason, evidence=evidence, kind=kind)
