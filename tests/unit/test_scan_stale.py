"""The scan skips stale return addresses only on evidence read from the call's bytes.

A hand-built i386/x86-64 process (fallback_world): `leaf` is the frame
being unwound, `level1` called it; above leaf's sp lie words that earlier
code left: the return address of a call to the pc thunk, and one of a
direct call to another function.
"""

import pytest

from plugin.arch import reader
from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus
from plugin.strategies import scan
from fallback_world import CODE, I386, STACK_TOP, X86, World

SCAN_ONLY = ("scan",)
THUNK = b"\x8b\x1c\x24\xc3"         # __x86.get_pc_thunk.bx: mov ebx, [esp]; ret


def call_to(world, offset, target):
    """`call rel32` at CODE+offset to `target`; returns the return address after it."""
    end = CODE + offset + 5
    world.put_code(CODE + offset, b"\xe8" + ((target - end) % (1 << 32)).to_bytes(4, "little"))
    return end


def stale_world(arch=I386):
    w = World(arch)
    w.function("_start", 0x000, 0x100, frame_pointer=False)
    w.function("level1", 0x200, 0x100, frame_pointer=False)
    leaf = w.function("leaf", 0x300, 0x100, frame_pointer=False)
    other = w.function("other", 0x400, 0x100, frame_pointer=False)
    thunk = w.function("__x86.get_pc_thunk.bx", 0x500, 0x10, frame_pointer=False)
    w.put_code(thunk, THUNK)
    return w, leaf, other, thunk


def step(w, sp, pc):
    regs = w.registers(pc=pc, sp=sp)
    frame = Frame(level=0, pc=pc, registers=regs, method="context", exact_pc=True)
    return scan.step(frame, w.context(SCAN_ONLY))


def test_a_call_to_the_pc_thunk_is_skipped():
    w, leaf, _, thunk = stale_world()
    stale = call_to(w, 0x301, thunk)            # leaf's own `call __x86.get_pc_thunk.bx`
    ra = call_to(w, 0x220, leaf)
    sp = STACK_TOP - 0x400
    w.word(sp + 4, stale)
    w.word(sp + 12, ra)
    outcome = step(w, sp, leaf + 0x20)
    assert outcome.status == AttemptStatus.RECOVERED
    assert outcome.registers[I386.pc] == ra and outcome.evidence.entry["slot"] == sp + 12
    notes = "\n".join(outcome.evidence.notes)
    assert "skipped [sp+0x4] = 0x%x: follows a call to a pc thunk at 0x%x, which returned at once" % (
        stale, thunk) in notes, notes


@pytest.mark.parametrize("arch", [I386, X86])
def test_a_call_elsewhere_is_skipped_when_a_word_above_follows_a_call_to_the_callee(arch):
    w, leaf, other, _ = stale_world(arch)
    stale = call_to(w, 0x240, other)
    ra = call_to(w, 0x260, leaf)
    word = arch.address_size
    sp = STACK_TOP - 0x400
    w.word(sp + 2 * word, stale)
    w.word(sp + 5 * word, ra)
    outcome = step(w, sp, leaf + 0x20)
    assert outcome.registers[arch.pc] == ra and outcome.evidence.entry["slot"] == sp + 5 * word
    assert outcome.evidence.entry["skipped_code_pointers"] == 1
    notes = "\n".join(outcome.evidence.notes)
    assert ("follows a call to 0x%x, which is not leaf's start 0x%x nor a PLT stub, while [0x%x] = 0x%x "
            "above follows a call to 0x%x" % (other, leaf, sp + 5 * word, ra, leaf)) in notes, notes


def test_without_a_word_above_that_called_the_callee_the_first_candidate_stays():
    """A tail call (level1 calls other, other jumps to leaf) looks alike: no evidence, no skip."""
    w, leaf, other, _ = stale_world()
    ra = call_to(w, 0x240, other)
    higher = call_to(w, 0x020, CODE + 0x200)      # _start called level1, not leaf
    sp = STACK_TOP - 0x400
    w.word(sp + 8, ra)
    w.word(sp + 24, higher)
    outcome = step(w, sp, leaf + 0x20)
    assert outcome.registers[I386.pc] == ra and outcome.evidence.entry["skipped_code_pointers"] == 0


def test_direct_call_target_is_read_from_the_call_bytes():
    w, leaf, other, _ = stale_world()
    forward, backward = call_to(w, 0x240, other), call_to(w, 0x600, leaf)
    read = reader(w.target().read_memory)
    assert I386.direct_call_target(read, forward) == other
    assert I386.direct_call_target(read, backward) == leaf
    w.put_code(CODE + 0x700, b"\xff\xd0")        # call eax: no target in the bytes
    assert I386.direct_call_target(read, CODE + 0x702) is None
    assert I386.returns_to_caller_at_once(read, CODE + 0x500)
    assert not I386.returns_to_caller_at_once(read, leaf)
