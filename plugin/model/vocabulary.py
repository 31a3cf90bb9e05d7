"""The base of every closed vocabulary: a str-valued enum whose members carry a description.

Members compare, hash and print as their string value, so JSON and text
keep the words scripts already match, and each word says what it means
in one place.
"""

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
