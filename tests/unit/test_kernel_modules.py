"""plugin.modules.kernel.loaded_modules: the kernel's module list read from guest memory built here
(a struct module with its name at +24 and num_orcs, orc_unwind_ip, orc_unwind at some offset, as
the kernel lays them out), and a module found before taken again without its struct searched."""
import struct

from plugin import arch as arches
from plugin.errors import MemoryReadError
from plugin.formats import orc
from plugin.modules import ModuleMap, kernel
from plugin.modules.module import Module, ModuleFormat, Segment

HEAD = 0xFFFFFFFF82300000                  # the kernel's `modules` list head
STRUCT = 0xFFFFFFFFA0010000                # a struct module in the module area
FIELDS = 0x120                             # where its ORC fields are
IPS, ENTRIES, CODE = 0xFFFFFFFFA0020000, 0xFFFFFFFFA0021000, 0xFFFFFFFFA0000000
COUNT = 3


class Memory:
    def __init__(self, ips=IPS):
        self.words = {}
        self.reads = []
        node = STRUCT + 8
        self.put(HEAD, struct.pack("<Q", node))
        body = bytearray(kernel.STRUCT_MODULE_SCAN)
        body[8:16] = struct.pack("<Q", HEAD)                      # list.next: back to the head
        body[24:24 + 8] = b"mymod\0\0\0"
        body[FIELDS:FIELDS + 24] = struct.pack("<IIQQ", COUNT, 0, ips, ENTRIES)
        self.put(STRUCT, bytes(body))
        self.put(ips, b"".join(struct.pack("<i", CODE + 0x10 * i - (ips + 4 * i)) for i in range(COUNT)))
        self.put(ENTRIES, bytes(orc.ENTRY_SIZE * COUNT))

    def put(self, address, data):
        for offset, byte in enumerate(data):
            self.words[address + offset] = byte

    def read(self, address, size):
        self.reads.append((address, size))
        try:
            return bytes(self.words[address + i] for i in range(size))
        except KeyError:
            raise MemoryReadError(address, size, "not mapped") from None


def _kernel():
    module = Module(kernel.KERNEL_NAME, None, 0xFFFFFFFF81000000, arches.by_name("x86_64"), format=ModuleFormat.KERNEL)
    module.cache["module list"] = HEAD
    return module


def test_a_module_on_the_list_is_found_with_its_orc_tables():
    memory = Memory()
    (found,) = kernel.loaded_modules(_kernel(), memory.read)
    assert (found.name, found.header_address) == ("[mymod]", STRUCT)
    assert found.tables[".orc_unwind_ip"].address == IPS and found.tables[".orc_unwind_ip"].size == 4 * COUNT
    assert found.tables[".orc_unwind"].address == ENTRIES
    assert (found.start, found.end) == (CODE, CODE + 0x10 * (COUNT - 1) + 1)


def test_a_module_found_before_is_taken_again_without_its_struct_searched():
    first = Memory()
    (module,) = kernel.loaded_modules(_kernel(), first.read)
    again = Memory()
    (found,) = kernel.loaded_modules(_kernel(), again.read, {(module.name, module.header_address): module})
    assert found is module                                      # its decoded tables are kept with it
    assert (STRUCT, kernel.STRUCT_MODULE_SCAN) in first.reads
    assert (STRUCT, kernel.STRUCT_MODULE_SCAN) not in again.reads and len(again.reads) < len(first.reads)


def test_a_module_whose_struct_gives_other_tables_is_found_again():
    (module,) = kernel.loaded_modules(_kernel(), Memory().read)
    moved = Memory(ips=IPS + 0x800)             # reloaded at the same address, its tables elsewhere
    (found,) = kernel.loaded_modules(_kernel(), moved.read, {(module.name, module.header_address): module})
    assert found is not module and found.tables[".orc_unwind_ip"].address == IPS + 0x800


class Guest:
    """A target for ModuleMap: the kernel found already, its stops counted as GDB's target counts them."""
    generation, stops = 1, 0

    def __init__(self, memory):
        self.read_exact = memory.read

    def modules(self):
        return []


def test_a_new_stop_reads_the_module_list_again_only_for_an_address_outside_the_kernels_image():
    memory = Memory()
    modules = ModuleMap(Guest(memory))
    core = _kernel()
    core.segments.append(Segment(0xFFFFFFFF81000000, 0xFFFFFFFF82000000, True))
    modules.generation, modules.modules, modules._kernel = Guest.generation, [core], core
    modules._add_kernel_modules()       # as when the kernel was found
    modules._sort()
    assert [m.name for m in modules.all()] == [kernel.KERNEL_NAME, "[mymod]"]
    modules.target.stops += 1
    memory.reads.clear()
    assert modules.find(0xFFFFFFFF81001000) is core and memory.reads == []    # no module load moves the kernel
    assert modules.kernel() is core and memory.reads == []
    assert modules.find(CODE + 0x10).name == "[mymod]" and (HEAD, 8) in memory.reads
    memory.reads.clear()
    assert modules.find(CODE + 0x10).name == "[mymod]" and memory.reads == []     # once a stop
    modules.target.stops += 1
    assert [m.name for m in modules.all()] == [kernel.KERNEL_NAME, "[mymod]"] and (HEAD, 8) in memory.reads
