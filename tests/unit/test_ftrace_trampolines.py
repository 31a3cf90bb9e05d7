"""The kernel's dynamic ftrace trampolines (plugin.modules.kernel.ftrace_trampolines,
plugin.strategies.orc.OrcTables.trampoline_at) on a guest memory built here: ftrace_ops_list
with one ops whose trampoline copies ftrace_caller. The list is read at the first stop that asks;
at a later stop the trampoline is taken again after a look at its first bytes only, and read
again where those bytes changed (its memory freed or given to other code)."""
import struct

from plugin import arch as arches
from plugin.modules import kernel
from plugin.modules.module import Module, ModuleFormat
from plugin.strategies.orc import OrcTables
from plugin.target import SnapshotTarget

X86 = arches.by_name("x86_64")
TEXT, DATA = 0xFFFFFFFF81000000, 0xFFFFFFFF82000000
CALLER, REGS_CALLER = TEXT + 0x700, TEXT + 0x800
LIST, LIST_END, OPS = DATA, DATA + 0x100, DATA + 0x1000
TRAMPOLINE = 0xFFFFFFFFC0201000
CALLER_CODE = bytes(range(1, 33))                   # what ftrace_caller begins with
REGS_CODE = bytes(range(101, 133))                  # ftrace_regs_caller's


class Guest(SnapshotTarget):
    """A guest whose reads are counted (exact: those not through a page cache, read_exact), and
    whose stops are counted as GDB's target counts them."""
    stops = 0

    def __init__(self, regions):
        super().__init__(X86, regions=regions)
        self.exact, self.reads = [], []

    def read_memory(self, address, size):
        self.reads.append((address, size))
        return super().read_memory(address, size)

    def read_exact(self, address, size):
        self.exact.append((address, size))
        return super().read_memory(address, size)


def _guest(trampoline_code=CALLER_CODE, listed=True):
    ops = bytearray(0x200)
    struct.pack_into("<Q", ops, 8, LIST_END)                        # ops->next: the end of the list
    struct.pack_into("<QQ", ops, 0x58, TRAMPOLINE, 0xB0)            # trampoline, trampoline_size
    return Guest([(LIST, struct.pack("<Q", OPS if listed else LIST_END)), (OPS, bytes(ops)),
                  (CALLER, CALLER_CODE), (REGS_CALLER, REGS_CODE), (TRAMPOLINE, trampoline_code + bytes(0xA0))])


def _kernel():
    module = Module(kernel.KERNEL_NAME, None, 0, X86, format=ModuleFormat.KERNEL)
    module.cache["ftrace"] = {"ftrace_ops_list": LIST, "ftrace_list_end": LIST_END,
                              "ftrace_caller": CALLER, "ftrace_caller_end": CALLER + 0x90,
                              "ftrace_regs_caller": REGS_CALLER, "ftrace_regs_caller_end": REGS_CALLER + 0xC0}
    return module


def test_a_trampoline_is_found_on_ftraces_list_and_mapped_to_the_code_it_copies():
    (found,) = kernel.ftrace_trampolines(_kernel(), _guest().read_memory)
    # its size is bounded by the code it copies (0x90), not by trampoline_size (0xb0)
    assert found == kernel.Trampoline(TRAMPOLINE, 0x90, CALLER, CALLER_CODE[:kernel.SAME_START])
    regs = _guest(trampoline_code=REGS_CODE)
    assert [t.copied for t in kernel.ftrace_trampolines(_kernel(), regs.read_memory)] == [REGS_CALLER]
    assert kernel.ftrace_trampolines(_kernel(), _guest(listed=False).read_memory) == []


def test_a_later_stop_looks_at_the_trampolines_first_bytes_only():
    guest = _guest()
    tables = OrcTables(_kernel(), guest)
    assert tables.trampoline_at(TRAMPOLINE + 0x10).copied == CALLER
    assert (LIST, 8) in guest.exact                 # the list read at the first stop
    guest.exact.clear()
    assert tables.trampoline_at(TRAMPOLINE + 0x20).copied == CALLER and guest.exact == []   # the same stop
    assert tables.trampoline_at(TRAMPOLINE + 0x100) is None and guest.exact == []   # read once a stop
    guest.stops += 1
    guest.reads.clear()
    assert tables.trampoline_at(TRAMPOLINE + 0x10).copied == CALLER
    # its first bytes only, through the page cache (the return address's checks often read that block)
    assert guest.exact == [] and guest.reads == [(TRAMPOLINE, kernel.SAME_START)]
    guest.reads.clear()
    assert tables.trampoline_at(TRAMPOLINE + 0x18) is not None and guest.exact == guest.reads == []


def test_a_trampoline_whose_code_changed_sends_the_lookup_back_to_the_list():
    tables = OrcTables(_kernel(), _guest())
    assert tables.trampoline_at(TRAMPOLINE) is not None
    freed = _guest(trampoline_code=bytes(32), listed=False)         # unregistered, its memory reused
    freed.stops = 1
    tables.target = freed
    assert tables.trampoline_at(TRAMPOLINE + 0x10) is None
    assert (LIST, 8) in freed.exact             # looked for on the list again, where it is no more
    moved = _guest(trampoline_code=REGS_CODE)       # a new trampoline at the same place, of the other caller
    moved.stops = 2
    tables.target = moved
    assert tables.trampoline_at(TRAMPOLINE + 0x10).copied == REGS_CALLER
