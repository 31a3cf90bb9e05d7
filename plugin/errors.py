"""The two error types the core raises on purpose, and the kinds of a decode error."""
from __future__ import annotations

import enum


class DecodeKind(enum.Enum):
    """What is wrong with what a decoder was given (the cause says it in words)."""
    MALFORMED = "malformed"         # the bytes break the format's rules (the default)
    TRUNCATED = "truncated"         # a record, operand or number runs past the end of its data
    UNREADABLE = "unreadable"       # the target could not supply the bytes (a MemoryReadError on the way)
    LIMIT = "limit"                 # a bound the plugin declares was passed (a number too long, nesting)
    UNSUPPORTED = "unsupported"     # a version, encoding or opcode this decoder does not know
    ABSENT = "absent"               # a part the decode needs is not there (a segment, slice, section, the code)


class DecodeError(Exception):
    """A table could not be decoded: names the section, the offset, the cause and its kind.

    Decoders raise only this for bad input, so callers can catch exactly it.
    """

    def __init__(self, section, offset, cause, kind: DecodeKind = DecodeKind.MALFORMED):
        self.section = section
        self.offset = offset
        self.cause = cause
        self.kind = kind
        where = "%s+0x%x" % (section, offset) if offset is not None else section
        super().__init__("%s: %s" % (where, cause))


class MemoryReadError(Exception):
    """The target could not supply the bytes asked for."""

    def __init__(self, address, size, cause="unreadable"):
        self.address = address
        self.size = size
        super().__init__("cannot read %d bytes at 0x%x: %s" % (size, address, cause))


def bad_file_errors() -> tuple:
    """Everything reading a damaged file can raise: the decoders' DecodeError, the
    file system's OSError, pyelftools' errors (ELFError, ELFParseError, its construct
    errors, and the ValueError, struct.error, EOFError and OverflowError its readers let
    through on a bad offset or size). Defined once: plugin.errors.guard and the offline
    commands' opening of a file use it."""
    import struct
    from elftools.common.exceptions import ELFError, ELFParseError
    from elftools.construct import ConstructError
    return (DecodeError, MemoryReadError, OSError, ValueError, OverflowError, EOFError, struct.error,
            ELFError, ELFParseError, ConstructError)


class guard:
    """`with guard(problems, what):` -- the documented outcome of a damaged file: the
    error becomes one line, "what: reason", appended to `problems`, and the work after
    the block goes on (`.failed` says whether it was cut short). Anything else (a
    defect, KeyboardInterrupt) passes through."""

    def __init__(self, problems: list, what: str) -> None:
        self.problems = problems
        self.what = what
        self.failed = False

    def __enter__(self) -> "guard":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, bad_file_errors()):
            return False
        self.failed = True
        self.problems.append("%s: %s" % (self.what, getattr(exc, "strerror", None) or exc)
                             if self.what else str(exc))
        return True
