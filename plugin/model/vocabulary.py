"""The base of every closed vocabulary: a str-valued enum whose members carry a description.

Members compare, hash and print as their string value, so JSON and text
keep the words scripts already match, and each word says what it means
in one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Vocabulary(str, Enum):
    """Declare members as NAME = ("json-word", "what it means")."""

    def __new__(cls, value: str, description: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member

    __hash__ = str.__hash__
    __format__ = str.__format__

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Found:
    """An address found in one of several ways: `by` a Vocabulary member naming the way,
    `why` the sentence evidence gives for it. Records of what a strategy recognised
    (a function's start, a signal trampoline) extend it with their own fields."""
    address: int
    by: Vocabulary
    why: str
