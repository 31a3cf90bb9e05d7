"""The module model: a loaded image, its mapped segments and where its unwind tables are.

Discovery (plugin/modules/elf.py, macho.py) builds these; strategies read
them; decoded tables are cached in Module.cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from plugin.arch import Arch
from plugin.memory import Region
from plugin.model.vocabulary import Vocabulary
from plugin.target import Target


class ModuleFormat(Vocabulary):
    """What kind of image a module is (Module.format; JSON and text print the word)."""
    ELF = ("elf", "an ELF image")
    MACHO = ("macho", "a Mach-O image")
    PE = ("pe", "a PE (Windows) image")
    KERNEL = ("kernel", "the Linux kernel or one of its modules, found from its symbols")


@dataclass
class Segment:
    start: int
    end: int
    executable: bool
    file_offset: int = 0


@dataclass
class TableLocation:
    """Where one unwind table is: its address and size in the debuggee, and how we found it."""
    section: str
    address: int
    size: int
    found_by: str          # e.g. "PT_GNU_EH_FRAME", "eh_frame_ptr", "section headers of FILE"
    in_memory: bool = True


@dataclass
class Module:
    name: str
    path: str | None       # None: not on disk (the vdso, JIT code)
    header_address: int
    arch: Arch
    format: ModuleFormat = ModuleFormat.ELF
    load_bias: int = 0
    segments: list[Segment] = field(default_factory=list)
    tables: dict[str, TableLocation] = field(default_factory=dict)      # section name -> TableLocation
    build_id: str | None = None
    uuid: str | None = None
    problems: list = field(default_factory=list)    # what could not be read, for `unwind modules`
    cache: dict = field(default_factory=dict)       # decoded tables, owned by strategies

    @property
    def start(self) -> int:
        return min(s.start for s in self.segments) if self.segments else self.header_address

    @property
    def end(self) -> int:
        return max(s.end for s in self.segments) if self.segments else self.header_address

    def contains(self, address: int) -> bool:
        return any(s.start <= address < s.end for s in self.segments)

    def is_executable(self, address: int) -> bool:
        return any(s.executable and s.start <= address < s.end for s in self.segments)

    def segment_end(self, address: int) -> int | None:
        for s in self.segments:
            if s.start <= address < s.end:
                return s.end
        return None


def region_of(target: Target, location: TableLocation) -> Region:
    """A Region over a table that lives in the debuggee's memory."""
    return Region(location.section, location.address, location.size, target.read_memory)
