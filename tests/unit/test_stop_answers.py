"""gdb_unwinder/stop_answers.py: what an answer recorded keeps, and what it does not."""
from __future__ import annotations

from gdb_unwinder import stop_answers
from gdb_unwinder.stop_answers import StopAnswers

KEY = ("thread", 3, 0x1000, 0x7ff0)


def _recorded(memo, info, given=True, claim=None, declines=(), failed=False, key=KEY):
    memo.begin()
    for decline in declines:
        memo.declined(decline)
    if given:
        memo.given("id", ["rip"], [0x2000])
    if claim is not None:
        memo.claimed(claim)
    if failed:
        memo.failed()
    memo.end(key, info, False)
    return memo.get(key)


def test_a_claim_keeps_what_it_gave_its_claim_and_declines():
    answer = _recorded(StopAnswers(), "info", claim=("inferior", 3, "record", 0x2000, 0x7ff8), declines=[(3, 1, "why")])
    assert answer.given == ("id", ["rip"], [0x2000])
    assert answer.claim == ("inferior", 3, "record", 0x2000, 0x7ff8)
    assert answer.declines == ((3, 1, "why"),)


def test_a_decline_keeps_no_registers_and_no_claim():
    answer = _recorded(StopAnswers(), None, claim=("inferior", 3, "record", 0, 0), declines=[(3, 1, "covered")])
    assert answer.given is None and answer.claim is None
    assert answer.declines == ((3, 1, "covered"),)


def test_nothing_is_kept_after_an_internal_error_or_without_what_was_given():
    assert _recorded(StopAnswers(), "info", failed=True) is None
    assert _recorded(StopAnswers(), "info", given=False) is None


def test_a_recording_starts_empty():
    memo = StopAnswers()
    _recorded(memo, "info", claim=("inferior", 3, "record", 0, 0), declines=[(3, 1, "why")])
    answer = _recorded(memo, None, given=False, key=("thread", 4, 1, 2))
    assert answer.declines == () and answer.claim is None


def test_hits_are_counted_and_clear_forgets():
    memo = StopAnswers()
    _recorded(memo, "info")
    assert memo.hits == 1
    memo.clear()
    assert memo.get(KEY) is None and memo.hits == 1


def test_bounded(monkeypatch):
    monkeypatch.setattr(stop_answers, "BOUND", 3)
    memo = StopAnswers()
    for level in range(4):
        _recorded(memo, "info", key=("thread", level, 1, 2))
    assert memo.get(("thread", 0, 1, 2)) is None and memo.get(("thread", 3, 1, 2)) is not None
