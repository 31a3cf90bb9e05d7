"""Unwind strategies: one file per source, each turning a table entry (or the
stack itself) plus the current registers into the caller's registers and
evidence. A strategy never raises: it answers with an Outcome.
"""

from dataclasses import dataclass

RECOVERED = "recovered"
NOT_APPLICABLE = "not applicable"
FAILED = "failed"


@dataclass
class Outcome:
    status: str
    source: str
    reason: str = ""
    registers: dict = None          # the caller's registers when recovered
    evidence: object = None         # StepEvidence, also for failures when there is some
    outermost: bool = False         # the table says this frame has no caller
    signal_frame: bool = False      # the frame just unwound is a signal trampoline

    @classmethod
    def not_applicable(cls, source, reason):
        return cls(NOT_APPLICABLE, source, reason)

    @classmethod
    def failed(cls, source, reason, evidence=None):
        return cls(FAILED, source, reason, evidence=evidence)


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

    @classmethod
    def of(cls, module, target):
        tables = module.cache.get(cls.SOURCE)
        if tables is None:
            tables = module.cache[cls.SOURCE] = cls(module, target)
        return tables
