"""Unwind strategies: one file per source, each turning a table entry (or the
stack itself) plus the current registers into the caller's registers and
evidence. A strategy never raises: it answers with an Outcome
(plugin.model.outcome), which says what kind of failure it met, if any.
"""
from __future__ import annotations

from plugin.errors import DecodeError, MemoryReadError
from plugin.model.outcome import FailureKind, Outcome, error_kind


class ModuleTables:
    """One source's tables for one module, decoded on first use.

    Kept in module.cache under the source's name, so they live exactly as
    long as the module does (dropped when the debugger's modules change).
    Subclasses set SOURCE and extend __init__.
    """
    SOURCE = None

    def __init__(self, module, target):
        self.module = module
        self.target = target
        self.problems = []          # what could not be read, for explanations
        self.unreadable = False     # a read failed while loading them
        self._loaded = {}           # table name -> what once() loaded (None: absent or bad)

    def once(self, name: str, load, errors=(DecodeError, MemoryReadError, OSError)):
        """What load() returns for the table `name`, called on its first use only (a load that
        raised is not tried again); None, with the problem noted, when load raises one of
        `errors` (the table cannot be decoded or read)."""
        if name not in self._loaded:
            self._loaded[name] = None
            try:
                self._loaded[name] = load()
            except errors as exc:
                self.note_problem(name, exc)
        return self._loaded[name]

    def note_problem(self, what: str, exc: Exception) -> None:
        """Record why part of the tables could not be loaded: for explanations, and for the failure kind."""
        self.problems.append("%s: %s" % (what, exc))
        self.unreadable = self.unreadable or error_kind(exc) == FailureKind.UNREADABLE_MEMORY

    def missing_kind(self, kind: FailureKind) -> FailureKind:
        """The kind of "nothing here" (no table, no entry): unreadable memory if a read failed loading them."""
        return FailureKind.UNREADABLE_MEMORY if self.unreadable else kind

    @classmethod
    def of(cls, module, target):
        tables = module.cache.get(cls.SOURCE)
        if tables is None:
            tables = module.cache[cls.SOURCE] = cls(module, target)
        return tables

    @classmethod
    def for_frame(cls, frame, ctx):
        """(lookup pc, this source's tables of the module holding it), or (pc, the
        not-applicable Outcome) when no module holds the pc."""
        pc = ctx.lookup_pc(frame)
        module = ctx.modules.find(pc)
        if module is None:
            return pc, Outcome.not_applicable(cls.SOURCE, "no module contains 0x%x" % pc, FailureKind.NO_MODULE)
        return pc, cls.of(module, ctx.target)

    def absent(self, what: str) -> Outcome:
        """The module has no such table ("no .sframe (no PT_GNU_SFRAME program header)"),
        or loading it failed (then the problems say why)."""
        reason = "%s has %s" % (self.module.name, what)
        if self.problems:
            reason = "%s: %s" % (self.module.name, "; ".join(self.problems))
        return Outcome.not_applicable(self.SOURCE, reason, self.missing_kind(FailureKind.NO_TABLE))
