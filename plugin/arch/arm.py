"""32-bit Arm, AArch32 (DWARF for the Arm Architecture, ARM IHI 0040).

r0-r15 are DWARF 0-15 (sp = r13, lr = r14, pc = r15); the VFP/Neon
doubles d0-d31 are 256-287, iWMMXt wCGR0-7 104-111 and wR0-15 112-127.
GCC's CFI uses lr (14) as the return-address column. The frame pointer is
r11 in Arm code (r7 in Thumb code, which GDB names by number). r4-r11 are
callee-saved core registers (AAPCS 5.1.1); d8-d15 are too, but they are
64 bits wide and the core's rules read address-sized words, so they are not
listed. CPSR has no DWARF number; CPSR below is the plugin's own key for it
(outside every range AADWARF assigns), so a caller's Thumb state (bit 5,
T) can be handed to the debugger, whose Arm code asks every frame for it.
The module registers itself in plugin.arch's tables on import.
"""

from dataclasses import dataclass

from plugin import arch as arches
from plugin.arch import Arch

ELF_MACHINE_ARM = 40
D0, WCGR0, WR0 = 256, 104, 112
CPSR = 0x1000
CPSR_THUMB = 0x20

_NAMES = {n: "r%d" % n for n in range(13)}
_NAMES.update({13: "sp", 14: "lr", 15: "pc", CPSR: "cpsr"})
for _n in range(32):
    _NAMES[D0 + _n] = "d%d" % _n
for _n in range(8):
    _NAMES[WCGR0 + _n] = "wcgr%d" % _n
for _n in range(16):
    _NAMES[WR0 + _n] = "wr%d" % _n


@dataclass(frozen=True)
class ArmArch(Arch):
    def return_to(self, ra: int, callee, caller: dict) -> int:
        """Bit 0 of a return address is the caller's instruction set (1: Thumb): the pc
        drops it and the caller's CPSR.T is set from it (when the callee's CPSR is known)."""
        cpsr = callee.get(CPSR)
        if cpsr is not None:
            caller[CPSR] = (cpsr | CPSR_THUMB) if ra & 1 else (cpsr & ~CPSR_THUMB)
        return ra & ~1


ARCH = ArmArch(
    name="arm", address_size=4, byteorder="little",
    registers=_NAMES,
    sp=13, fp=11, ra=14, pc=15,
    callee_saved=tuple(range(4, 12)),
    elf_machine=ELF_MACHINE_ARM,
    aliases={"r13": 13, "r14": 14, "r15": 15, "fp": 11, "ip": 12},
)

arches.BY_NAME.setdefault(ARCH.name, ARCH)
arches.BY_ELF_MACHINE.setdefault(ARCH.elf_machine, ARCH)
