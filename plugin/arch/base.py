"""The Arch record and the facts every architecture shares (plugin.arch re-exports them).

See plugin/arch/__init__.py for what an Arch says."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Callable, NamedTuple, Optional

Read = Callable[[int, int], Optional[bytes]]

# The C library's thread-creating system-call wrappers (glibc, musl, bionic).
# Their code between the system call and the branch to the child's start has
# no unwind table; the name says which system call the instruction before pc
# made, the registers say on which side of it the thread is.
CLONE_FUNCTIONS = ("clone", "__clone", "clone3", "__clone3", "__GI___clone", "__GI___clone3")


class FrameEdge(str, Enum):
    """Where, at an exact pc, the frame record of the function is not in place."""
    ENTRY = "function entry"
    AFTER_PUSH = "frame record being built"
    AT_RETURN = "function exit"
    BAD_CALL_TARGET = "call to a non-code address"

    def __str__(self) -> str:   # as enum.StrEnum (Python 3.11+) prints its members
        return self.value


class Edge(NamedTuple):
    """A frame edge found from the code at pc.

    record_size is, for AFTER_PUSH, how far below the CFA the record just
    stored at sp is (0 otherwise); why says which instructions showed it.
    """
    kind: FrameEdge
    record_size: int
    why: str
    slots: Optional["Slots"] = None     # set when the frame is laid out otherwise (Go's prologues)
    ra_in: Optional[int] = None         # for ENTRY: the register holding the return address, when not the arch's


class Slots(NamedTuple):
    """A frame at an exact pc, as offsets: CFA = sp + cfa; the return address at [CFA + ra];
    the caller's frame pointer at [CFA + fp], or (fp None) still in its register."""
    cfa: int
    ra: int
    fp: Optional[int]


class ChainLayout(NamedTuple):
    """A frame record [fp] = caller's fp, [fp + word] = return address, whose CFA is
    fp + cfa_offset (the ABI's usual record: two words) and which may lie up to
    below_sp bytes below sp (Go on arm64 keeps it just below sp)."""
    cfa_offset: int
    below_sp: int
    why: str


class SigReturn(NamedTuple):
    """A signal trampoline's code and the kernel's signal frame it returns through.

    When the handler returns into the trampoline, the registers of the
    interrupted code are saved at sp + context (the sigcontext or
    mcontext); saved maps each DWARF register number to its offset there.
    """
    code: bytes
    text: str                   # the instructions, as a person reads them
    context: int                # offset from sp of the saved register block
    saved: dict                 # DWARF number -> offset in the block


class PrologueModel(NamedTuple):
    """The debugger's heuristic answer for a frame: its row and the sentence saying why."""
    row: object                 # plugin.model.rules.Row
    why: str


def reader(read_memory: Callable[[int, int], bytes]) -> Read:
    """A `read` for the methods below over a read_memory that raises on unreadable memory."""
    def read(address, size):
        try:
            return bytes(read_memory(address, size))
        except Exception:       # unreadable code just means "no pattern here"
            return None
    return read


@dataclass(frozen=True)
class Arch:
    name: str
    address_size: int
    byteorder: str
    registers: dict            # DWARF number -> name
    sp: int
    fp: int
    ra: int                    # the return-address column of the CFI
    pc: int                    # the register the caller's pc is delivered in
    callee_saved: tuple
    elf_machine: int
    aliases: dict = field(default_factory=dict)   # extra names -> DWARF number
    stack_alignment: int = 0       # sp alignment the ABI keeps at calls; 0: the pointer size
    pointer_auth: bool = False     # return addresses may carry a pointer-auth signature
    keeps_frame_records: bool = False   # a frame-pointer chain convention is known
    min_instruction_size: int = 1
    returns: tuple = ()            # (encoding, mnemonic) of each return instruction
    sigreturns: tuple = ()         # SigReturn: the kernel's signal trampolines
    vector_names: dict = field(default_factory=dict)   # DWARF number -> name of registers only named
                                   # (vector/float: never read as a frame's integer registers)

    def __post_init__(self):
        if not self.stack_alignment:
            object.__setattr__(self, "stack_alignment", self.address_size)

    def name_of(self, number):
        return self.registers.get(number) or self.vector_names.get(number, "r%d" % number)

    def number_of(self, name):
        name = name.lower().lstrip("$%")
        for number, known in list(self.registers.items()) + list(self.vector_names.items()):
            if known == name:
                return number
        if name in self.aliases:
            return self.aliases[name]
        raise KeyError(name)

    @cached_property
    def mask(self):
        return (1 << (8 * self.address_size)) - 1

    def strip_pointer_auth(self, value):
        """Drop pointer-authentication bits from a code address (aarch64)."""
        return value

    def return_to(self, ra: int, callee, caller: dict) -> int:
        """The caller's pc for return address `ra`; may set the caller's state registers in
        `caller` from the callee's (`callee`: DWARF number -> value). The base: ra itself."""
        return ra

    # -- instruction facts: the base class knows none --------------------------

    def call_before(self, read: Read, address: int) -> Optional[str]:
        """The call form that ends at `address` (e.g. "call rel32"), or None.

        A return address is the address right after a call, so the bytes that
        end there must decode as one: used by `unwind compare` when two
        unwinders disagree, by the stack scanner and by the frame-pointer check.
        """
        return None

    def direct_call_target(self, read: Read, address: int) -> Optional[int]:
        """The target of the direct call that ends at `address`, or None (not one, or unknown)."""
        return None

    def returns_to_caller_at_once(self, read: Read, address: int) -> bool:
        """Is the code at `address` a function that returns at once without keeping its return
        address on the stack (a pc thunk)? The base knows none."""
        return False

    def return_at(self, read: Read, pc: int) -> Optional[str]:
        """The mnemonic of the return instruction at pc (from `returns`), or None."""
        lengths = sorted({len(encoding) for encoding, _ in self.returns}, reverse=True)
        for length in lengths:          # the longest read that succeeds: pc may end a mapping
            code = read(pc, length)
            if code is not None:
                return self.return_in(code)
        return None

    def return_in(self, code: bytes) -> Optional[str]:
        """The mnemonic of the return instruction `code` starts with, or None."""
        for encoding, mnemonic in self.returns:
            if code.startswith(encoding):
                return mnemonic
        return None

    def entries_in(self, code: bytes, base: int) -> list:
        """Addresses in code (read at base) where a frame-record prologue opens a function, last first."""
        return []

    def debugger_prologue_row(self, read: Read, start: Optional[int], pc: int) -> Optional["PrologueModel"]:
        """What the debugger's own prologue heuristic answers for a frame at pc whose function
        starts at `start` (None: the debugger knows no function there), or None where it is
        not modelled. The base models none."""
        return None

    def sigreturn_at(self, read: Read, pc: int) -> Optional[SigReturn]:
        """The signal trampoline whose code starts at pc, or None."""
        for trampoline in self.sigreturns:
            if read(pc, len(trampoline.code)) == trampoline.code:
                return trampoline
        return None

    def entry_row(self, pc: int, unchanged=(), ra_signed=False):
        """The Row where only the return address is on the stack (or in the link
        register): a function's first instruction and a return instruction. None
        when not known. `unchanged` lists registers to add with the rule "same"."""
        return None

    def frame_edge(self, read: Read, pc: int, start: Optional[int]) -> Optional[Edge]:
        """The frame edge the exact pc is at (start: the function's, from symbols), or None."""
        return None

    def stack_growth_edge(self, read: Read, pc: int, start: Optional[int], exact: bool = True) -> Optional[Edge]:
        """The edge when pc (exact, or when not `exact` a return address) is in code that a function's
        stack-bound check branches to before the frame is set up (Go's call of runtime.morestack);
        None otherwise."""
        return None

    def sets_up_frame_pointer(self, code: bytes) -> Optional[bool]:
        """Does `code` (a function's start) set up a frame pointer? None: not known."""
        return None

    def chain_layout(self, code: bytes) -> Optional[ChainLayout]:
        """The frame record a function's start (`code`) sets up, when not the usual one; None: usual."""
        return None

    def may_save_frame_pointer(self, prologue: Callable[[], Optional[bytes]]) -> bool:
        """Could a function's start have saved, and so reused, the frame pointer?

        `prologue` returns those bytes (None: unreadable); it is only called
        when the answer depends on them. True is the cautious answer.
        """
        return True

    # The system call instruction and the register its result is returned in.
    def syscall_before(self, read: Read, pc: int) -> Optional[int]:
        """The address of the system call instruction the code before pc ended
        with (followed only by tests of its result that do not change registers
        the caller needs), or None."""
        return None

    syscall_result: int = -1

    def child_of_clone(self, read: Read, pc: int, registers: dict) -> Optional[str]:
        """Why the thread at pc (in a clone/clone3 wrapper) is the new child, or None.

        The system call returns 0 in the child and the child's id (or an
        error) in the parent, so a zero result just after the call is the
        child's first instant: nothing above its sp is a frame.
        """
        at = self.syscall_before(read, pc)
        if at is None or registers.get(self.syscall_result) != 0:
            return None
        name = self.name_of(self.syscall_result)
        return ("pc 0x%x follows the system call at 0x%x and %s = 0, the child's result: this is the "
                "new thread's first frame" % (pc, at, name))

    def _at_entry(self, read: Read, pc: int, start: Optional[int], landing_pads) -> bool:
        """pc is the function's first instruction, or follows only a landing pad."""
        if start is None:
            return False
        if pc == start:
            return True
        first = read(start, 4)
        return pc == start + 4 and first is not None and first in landing_pads
