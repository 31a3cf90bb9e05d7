"""The unwinder's answers at this stop, given again when GDB rebuilds its frames without a resume.

GDB forgets its frames without the program running: `maintenance flush
register-cache` (`flushregs`), `gdb.invalidate_cached_frames()`, a thread
switch. Its own next `bt` then reads the registers and stack words again from
its register cache and stack cache, which it keeps until the program runs; the
plugin keeps what it answered for each frame the same way (its frame id, the
registers handed, or the decline, and the claim and declines recorded with it),
keyed (handover.frame_key) by thread, level, pc and sp, whether the callee's claim handed registers
on, and whether a signal interrupted the frame (what the answer rests on
besides the frame's own registers), until the unwinder's epoch moves (a stop, a
resume, a memory or register write, changed modules or settings:
PluginUnwinder.reconsider). A frame answered again hands GDB the very same
gdb.Values and records the same claim (the same Handed record, by identity), so
the answers FastClaims computed ahead from it are found again too.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

BOUND = 4096        # answers kept at most (cleared when full)


class Given(NamedTuple):
    """What an answer gave GDB: the frame id, the registers (descriptors or names) and their gdb.Values."""
    frame_id: object
    registers: list
    values: list


class Answer(NamedTuple):
    """One frame's answer: given (None: declined), the claim's (inferior, level, Handed, caller pc,
    caller sp) or None, the declines recorded, whether it dropped the unwinder's decline by pc."""
    given: Optional[Given]
    claim: Optional[tuple]
    declines: tuple
    drops_by_pc: bool


class StopAnswers:
    """The answers of this stop, and the one being recorded (begin ... end)."""

    def __init__(self):
        self._answers = {}      # (thread, level, pc, sp, callee claimed, after a signal) -> Answer
        self.hits = 0
        self._given = self._claim = None
        self._declines = []
        self._failed = False
        self._recording = False     # between begin() and end(): off, nothing is recorded (no cost, no growth)

    def clear(self):
        self._answers.clear()

    def get(self, key) -> Optional[Answer]:
        answer = self._answers.get(key)
        if answer is not None:
            self.hits += 1
        return answer

    def begin(self):
        """Start recording the answer of the frame GDB asks about."""
        self._given = self._claim = None
        self._declines = []
        self._failed = False
        self._recording = True

    def given(self, frame_id, registers, values):
        if self._recording:
            self._given = Given(frame_id, registers, values)

    def claimed(self, claim):
        if self._recording:
            self._claim = claim

    def declined(self, decline):
        if self._recording:
            self._declines.append(decline)

    def failed(self):
        """An internal error: nothing recorded is kept (the next `bt` tries again)."""
        self._failed = True

    def end(self, key, info, drops_by_pc):
        """Keep the answer recorded since begin(), GDB's UnwindInfo (or None, declined) made from it."""
        self._recording = False
        if self._failed or (info is not None and self._given is None):
            return
        if len(self._answers) >= BOUND:
            self._answers.clear()
        given = self._given if info is not None else None
        self._answers[key] = Answer(given, self._claim if given is not None else None,
                                    tuple(self._declines), drops_by_pc)

