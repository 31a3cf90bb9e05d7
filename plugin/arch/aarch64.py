"""AArch64 (DWARF for the Arm 64-bit architecture: x0-x30 = 0-30, sp = 31)."""

from dataclasses import dataclass

from plugin.arch import Arch

_NAMES = {n: "x%d" % n for n in range(31)}
_NAMES[29] = "x29"
_NAMES[30] = "x30"
_NAMES[31] = "sp"
_NAMES[32] = "pc"
_NAMES[34] = "ra_sign_state"   # pseudo register toggled by DW_CFA_AARCH64_negate_ra_state
for _n in range(32):
    _NAMES[64 + _n] = "v%d" % _n

# Virtual addresses use at most 48 bits here (52 with LVA, not used by Linux
# user space by default); the bits above carry the pointer-auth code.
_VA_BITS = 48


@dataclass(frozen=True)
class AArch64(Arch):
    def strip_pointer_auth(self, value):
        if value >> 55 & 1:          # kernel-half address: fill with ones
            return value | ~((1 << _VA_BITS) - 1) & self.mask
        return value & ((1 << _VA_BITS) - 1)


ARCH = AArch64(
    name="aarch64", address_size=8, byteorder="little",
    registers=_NAMES,
    sp=31, fp=29, ra=30, pc=32,
    callee_saved=tuple(range(19, 31)) + tuple(range(72, 80)),
    elf_machine=183,
    aliases={"fp": 29, "lr": 30},
)
