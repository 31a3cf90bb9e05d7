"""Unicorn set-up shared by the emulated Mach-O tests (test_compact_emulated.py,
compact_unwind_support.py): where an image and its stack are mapped, and the
register numbering of each architecture as Unicorn spells it."""

import struct

from compact_support import images

from plugin.formats.macho import MachO

import unicorn  # noqa: E402  (a test dependency: missing means the set-up was not run)
from unicorn import arm64_const as arm  # noqa: E402
from unicorn import x86_const as x86  # noqa: E402

LOAD_ADDRESS = 0x10000000
STACK_BASE, STACK_SIZE = 0x07000000, 0x00100000
SENTINEL = 0x0DEAD000            # return address of shapes_main: never executed
PAGE = 0x1000

X86_REGS = {0: x86.UC_X86_REG_RAX, 1: x86.UC_X86_REG_RDX, 2: x86.UC_X86_REG_RCX,
            3: x86.UC_X86_REG_RBX, 4: x86.UC_X86_REG_RSI, 5: x86.UC_X86_REG_RDI,
            6: x86.UC_X86_REG_RBP, 7: x86.UC_X86_REG_RSP,
            **{n: getattr(x86, "UC_X86_REG_R%d" % n) for n in range(8, 16)},
            16: x86.UC_X86_REG_RIP}
ARM64_REGS = {**{n: getattr(arm, "UC_ARM64_REG_X%d" % n) for n in range(29)},
              29: arm.UC_ARM64_REG_FP, 30: arm.UC_ARM64_REG_LR, 31: arm.UC_ARM64_REG_SP,
              32: arm.UC_ARM64_REG_PC}
ARM64_RET = struct.pack("<I", 0xD65F03C0)


def call_from_fresh_stack(uc, arch, argument):
    """Set uc up to call a function with one argument from a fresh stack; it returns to SENTINEL."""
    sp = STACK_BASE + STACK_SIZE - 0x100
    if arch == "x86_64":
        sp -= 8
        uc.mem_write(sp, struct.pack("<Q", SENTINEL))
        uc.reg_write(x86.UC_X86_REG_RDI, argument)
        uc.reg_write(x86.UC_X86_REG_RSP, sp)
    else:
        uc.reg_write(arm.UC_ARM64_REG_LR, SENTINEL)
        uc.reg_write(arm.UC_ARM64_REG_X0, argument)
        uc.reg_write(arm.UC_ARM64_REG_SP, sp)


def return_at_entry(uc, arch):
    """(return address, caller's sp) at a function's first instruction."""
    if arch == "x86_64":
        sp = uc.reg_read(x86.UC_X86_REG_RSP)
        return struct.unpack("<Q", uc.mem_read(sp, 8))[0], sp + 8
    return uc.reg_read(arm.UC_ARM64_REG_LR), uc.reg_read(arm.UC_ARM64_REG_SP)


def align_page(value):
    return (value + PAGE - 1) & ~(PAGE - 1)


def load_image(path, arch):
    """Unicorn with the image's segments mapped at LOAD_ADDRESS, and the
    MachO of the file told where it is loaded."""
    on_disk = images(path)[0]
    macho = MachO(on_disk.region, load_address=LOAD_ADDRESS)
    if arch == "x86_64":
        uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    else:
        uc = unicorn.Uc(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM)
    for seg in macho.segments:
        if seg.vmsize == 0:
            continue
        start = seg.vmaddr + macho.slide
        uc.mem_map(start, align_page(seg.vmsize))
        uc.mem_write(start, macho.region.read(seg.fileoff, seg.filesize))
    uc.mem_map(STACK_BASE, STACK_SIZE)
    return uc, macho
