"""The two error types the core raises on purpose."""


class DecodeError(Exception):
    """A table could not be decoded: names the section, the offset and the cause.

    Decoders raise only this for bad input, so callers can catch exactly it.
    """

    def __init__(self, section, offset, cause):
        self.section = section
        self.offset = offset
        self.cause = cause
        where = "%s+0x%x" % (section, offset) if offset is not None else section
        super().__init__("%s: %s" % (where, cause))


class MemoryReadError(Exception):
    """The target could not supply the bytes asked for."""

    def __init__(self, address, size, cause="unreadable"):
        self.address = address
        self.size = size
        super().__init__("cannot read %d bytes at 0x%x: %s" % (size, address, cause))
