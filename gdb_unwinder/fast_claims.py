"""Fast claims, computed a few frames ahead of GDB's questions.

GDB asks for a walk's frames in order, and between two questions it prints
the frame it got (symbols, lines, arguments). That work evicts the
interpreter's caches, so per-frame Python work costs several times more
when it runs between GDB's questions than in a loop. So where the previous
call claimed a frame and the next frames' plans have a FastRow (a plain
row, plugin/plans.py), this computes the claims of a run of frames at once
(replay_fast's registers, the gdb.Values to hand GDB, the frame id), and
each of GDB's questions then costs a look-up and the hand-over.

An answer is used only for the very question it was computed for: the
level it predicts, in the same thread, asked right after the claim it was
computed from (the same Handed record, by identity). GDB builds a thread's
frames one level at a time, each from the one below it, and asks the
unwinders about each new frame as it builds it: so the frame asked about
then is the caller of the frame just claimed, built from that claim's
registers. Anything else (an inline frame GDB put in between, another
thread or inferior, a frame the slow path decided) finds no answer,
and the answers are dropped at every stop, resume and change of modules or
settings. A run starts with two frames and doubles while GDB keeps asking,
up to AHEAD_MAX: a stop in a step, which needs one caller, computes little.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import gdb

from plugin.plans import replay_fast

from .claim import Claim
from .levels import inline_depth
from .compat import FrameId, pending_level
from .registers import Handed, handed_registers, unknown_registers

AHEAD_FIRST = 2         # answers computed when a run of fast claims starts
AHEAD_MAX = 64          # at most this many answers computed at once
AHEAD_KEPT = 4096       # answers kept at most (cleared when full)


class Answer(NamedTuple):
    """The claim for the pending frame at `level`, computed from the claim of its callee."""
    level: int
    frame_id: FrameId
    registers: list         # descriptors (or names) of the registers handed, in order
    values: list            # their gdb.Values
    record: Handed          # what this claim hands on to the next
    parent: Handed          # the callee's claim this one was computed from
    caller_pc: int          # the caller's pc and sp: the next answer's pending frame
    caller_sp: int


class FastClaims:
    """The fast path of a PluginUnwinder: answers computed ahead, and the gdb.Values they hand."""

    def __init__(self, state, handed, memo, ids):
        self.state = state
        self._handed = handed   # (inferior, level, Handed, caller pc, caller sp, thread): the unwinder's record of a claim
        self._memo = memo       # the unwinder's StopAnswers: what each claim gave GDB
        self._ids = ids         # the unwinder's FrameIds
        self._answers = {}      # level -> Answer
        self._size = AHEAD_FIRST
        self._types = {}        # register name -> (gdb.Type, the largest value an uncast gdb.Value holds)
        self._numbered = (None, None)   # (gdb.Architecture, {DWARF number: its descriptor, or name})

    def clear(self):
        self._answers.clear()
        self._size = AHEAD_FIRST

    def answered(self, pending_frame, last):
        """The answer computed ahead for this very question (the caller of the frame the previous
        call claimed: last, a LastClaim), handed to GDB; None where there is none."""
        answer = self._answers.get(pending_level(pending_frame))
        if answer is None or answer.parent is not last.record or gdb.selected_thread() is not last.thread \
                or pending_frame.architecture() is not last.inferior.target.gdb_arch:
            return None
        if not self._continued(answer):
            self._size = min(2 * self._size, AHEAD_MAX)     # GDB asked for the whole run: go further next time
        return self.hand(pending_frame, last.inferior, answer, last.thread)

    def claim_next(self, pending_frame, inferior, last, claim):
        """The claim of the caller of the frame the previous call claimed (last, a LastClaim), or
        None where the slow path must judge: a new run of answers computed from `last`."""
        level = pending_level(pending_frame)
        if gdb.selected_thread() is not last.thread or pending_frame.architecture() is not inferior.target.gdb_arch:
            return None
        answer = self._run(pending_frame, inferior, last, level, claim)
        if answer is None:
            return None
        if not self._continued(answer):
            self._size = min(2 * self._size, AHEAD_MAX)
        return self.hand(pending_frame, inferior, answer, last.thread)

    def _continued(self, answer) -> bool:
        """Is the answer for the frame above this one's caller computed (from this answer's claim)?"""
        above = self._answers.get(answer.level + 1)
        return above is not None and above.parent is answer.record

    def claim_one(self, pending_frame, inferior, plan, handed, ctx):
        """The claim for one frame whose callee this plugin claimed (handed: its complete record)
        and whose plan has a FastRow; None where replay_fast declines."""
        arch, thread = ctx.arch, gdb.selected_thread()
        answer = self._answer(pending_frame, plan, handed, ctx, pending_level(pending_frame),
                              self.registers(inferior.target, arch), unknown_registers(arch), thread)
        return None if answer is None else self.hand(pending_frame, inferior, answer, thread)

    def hand(self, pending_frame, inferior, answer, thread):
        """Give GDB the answer's frame id and registers (add_saved_register iterated in C)."""
        info = pending_frame.create_unwind_info(answer.frame_id)
        any(map(info.add_saved_register, answer.registers, answer.values))
        self._memo.given(answer.frame_id, answer.registers, answer.values)
        plans = inferior.plans
        plans.hits += 1
        plans.fast_hits += 1
        self._handed(inferior, answer.level, answer.record, answer.caller_pc, answer.caller_sp, thread)
        return info

    def _run(self, pending_frame, inferior, last, level, claim) -> Optional[Answer]:
        """Answers for `level` and up to self._size - 1 frames above it, each from the one before,
        while every frame passes the fast path's checks; the first, or None. The answers of earlier
        runs at other levels stay until the stop's end: where GDB builds the same frames again
        (StopAnswers gives the claims they were computed from again), they are answered again."""
        if len(self._answers) >= AHEAD_KEPT:
            self._answers.clear()
        handed, pc, sp = last.record, last.pc, last.sp
        target = inferior.target
        if level != last.level + 1 or target.trap_handler_names or not self.state.use_plans:
            return None
        ctx = self.state.unwinder_context(inferior)
        if inferior.plans.owner is not ctx:
            return None
        arch = ctx.arch
        numbered, unknown = self.registers(target, arch), unknown_registers(arch)
        checked = {}        # return address -> its plan, where the checks passed (a recursion repeats one)
        after_signal = inferior.after_signal    # frames a signal or interrupt left: exact pcs, the slow path's
        first = None
        for at in range(level, level + self._size):
            if handed.values is None or pc is None or sp is None or (pc, sp) in after_signal:
                break
            plan = checked.get(pc)
            if plan is None:
                plan = checked[pc] = self._plan(pending_frame, inferior, ctx, pc, claim)
            if plan is False or at <= inline_depth(pc, inferior.inline_depths):
                break
            answer = self._answer(pending_frame, plan, handed, ctx, at, numbered, unknown, last.thread)
            if answer is None:
                break
            self._answers[at] = answer
            if first is None:
                first = answer
            handed, pc, sp = answer.record, answer.caller_pc, answer.caller_sp
        return first

    @staticmethod
    def _plan(pending_frame, inferior, ctx, pc, claim):
        """The plan with a FastRow for return address pc, or False where the slow path must judge
        (under auto, also where GDB covers the frame: the slow path says why)."""
        plan = inferior.plans.get(pc - 1, False)
        if plan is None or plan.fast is None:
            return False
        if claim == Claim.AUTO and (inferior.coverage.gdb_covers(pc - 1, ctx, pending_frame, call_site=True) is not None
                                    or (pc - 1, False) in inferior.coverage.heuristic):
            return False
        return plan

    def _answer(self, pending_frame, plan, handed, ctx, level, numbered, unknown, thread) -> Optional[Answer]:
        """replay_fast's registers as a claim: a new gdb.Value only for those the row changed,
        the callee's gdb.Values for the others; None where replay_fast declines. numbered: the
        registers' descriptors (self.registers); unknown: unknown_registers(arch)."""
        values = handed.values
        replayed = replay_fast(plan, values, ctx)
        if replayed is None:
            return None
        arch, caller, fast = ctx.arch, replayed.registers, plan.fast
        given = dict(handed.raw)    # unchanged registers: the callee's gdb.Values
        for number in fast.written:
            value = caller.get(number)
            if value is None:
                given.pop(number, None)
            elif value != values.get(number) or number not in given:
                given[number] = self.value(pending_frame, arch.registers[number], value)
        for number in fast.undefined:
            given.pop(number, None)
        return Answer(level, self._ids.frame_id(thread, level, replayed.cfa, replayed.start),
                      list(map(numbered.__getitem__, given)),
                      list(given.values()), Handed.complete(given, caller, unknown), handed,
                      caller[arch.pc], caller.get(arch.sp))

    def registers(self, target, arch):
        """{DWARF number: gdb.RegisterDescriptor (or name)} of the registers a claim hands GDB."""
        gdb_arch, registers = self._numbered
        if gdb_arch is not target.gdb_arch:
            descriptors = target.descriptors
            registers = {n: descriptors.get(name, name) for n, name in handed_registers(arch)}
            self._numbered = (target.gdb_arch, registers)
        return registers

    def value(self, pending_frame, name, value):
        """value as a gdb.Value of the register's size: uncast (several times cheaper) where a
        plain gdb.Value of an int already has that size (a long long, or above its range an
        unsigned long long: a kernel address); GDB copies only the bytes."""
        known = self._types.get(name)
        if known is None:
            kind, plain = pending_frame.read_register(name).type, gdb.Value(0).type.sizeof
            known = self._types[name] = (kind, 1 << (8 * plain) if kind.sizeof == plain else 0)
        kind, limit = known
        if 0 <= value < limit:
            return gdb.Value(value)
        return gdb.Value(value).cast(kind)
