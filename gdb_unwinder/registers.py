"""The registers of GDB's pending frame, and what a claim hands GDB for its caller.

PendingRegisters reads the pending frame's registers by DWARF number, only
when a rule needs one; Handed keeps what a claim handed GDB, so that the
caller's own frame needs no read_register. (The frame id a claim gives GDB
is compat.FrameId.)
"""

import gdb


class PendingRegisters:
    """The pending frame's registers by DWARF number, read only when a rule needs one."""

    def __init__(self, pending_frame, arch, descriptors=None):
        self._frame = pending_frame
        self._arch = arch
        self._descriptors = descriptors or {}   # name -> gdb.RegisterDescriptor: a faster read than by name
        self.known = {}         # DWARF number -> int, or None when unreadable
        self.raw = {}           # DWARF number -> the gdb.Value read, to hand back unchanged

    def get(self, number, default=None):
        if number not in self.known:
            value = None
            raw = self.raw.get(number)
            if raw is None:
                name = self._arch.registers.get(number)
                if name is not None:
                    try:
                        raw = self._frame.read_register(self._descriptors.get(name, name))
                        if raw.is_optimized_out:
                            raw = None
                        else:
                            self.raw[number] = raw
                    except (gdb.error, ValueError):
                        raw = None
            if raw is not None:
                try:
                    value = int(raw) & self._arch.mask
                except (gdb.error, ValueError):
                    value = None
            self.known[number] = value
        value = self.known[number]
        return default if value is None else value

    def prefill(self, handed):
        """Take the registers this plugin handed GDB for this very frame (its callee's claim):
        they are what GDB would read back, so no read_register is needed. Registers not
        handed are unavailable (None in handed.known), as GDB would report them."""
        self.raw, self.known = handed.raw, handed.known     # shared: a later get adds the same int

    def same_value(self, number, name):
        """The pending frame's own gdb.Value of a register, for GDB's same-value rule; None if unavailable."""
        raw = self.raw.get(number)
        if raw is None and number not in self.known:
            try:
                raw = self._frame.read_register(self._descriptors.get(name, name))
                if raw.is_optimized_out:
                    raw = None
            except (gdb.error, ValueError):
                raw = None
            if raw is None:
                self.known[number] = None
            else:
                self.raw[number] = raw
        return raw

    def __contains__(self, number):
        return self.get(number) is not None

    def __getitem__(self, number):
        value = self.get(number)
        if value is None:
            raise KeyError(number)
        return value


class Handed:
    """What a claim handed GDB for its caller, as that caller's PendingRegisters will see it:
    raw, DWARF number -> gdb.Value; known, number -> int, None where not handed (absent where
    only the gdb.Value is known); values, the known ints as a plain dict when complete."""
    __slots__ = ("raw", "_known", "values", "_unknown")

    def __init__(self, raw, known, complete):
        self.raw, self._known, self._unknown = raw, known, None
        self.values = {n: v for n, v in known.items() if v is not None} if complete else None

    @classmethod
    def complete(cls, raw, values, unknown):
        """A complete record from its parts: unknown, the register numbers not handed (None).
        known is built on first use: a run of fast claims never needs it."""
        handed = cls.__new__(cls)
        handed.raw, handed.values, handed._known, handed._unknown = raw, values, None, unknown
        return handed

    @property
    def known(self):
        if self._known is None:
            self._known = dict(self._unknown)
            self._known.update(self.values)
        return self._known


_HANDED = {}


def handed_registers(arch):
    """(DWARF number, name) of every register a claim hands GDB (aarch64's RA column, x30,
    too: the caller's x30 is the return address its call left there); computed once per
    architecture."""
    pairs = _HANDED.get(arch.name)
    if pairs is None:
        pairs = _HANDED[arch.name] = tuple(arch.registers.items())
    return pairs


_UNKNOWN = {}


def unknown_registers(arch):
    """{number: None} for every register a claim hands GDB: a Handed record's known before its values."""
    unknown = _UNKNOWN.get(arch.name)
    if unknown is None:
        unknown = _UNKNOWN[arch.name] = dict.fromkeys(n for n, _ in handed_registers(arch))
    return unknown
