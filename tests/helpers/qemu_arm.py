"""32-bit Arm programs for live tests: ehabi.cpp built static with arm-linux-gnueabihf-g++,
run under `qemu-arm -g PORT` (its gdbstub serves GDB's `target remote` and LLDB's `gdb-remote`)."""

from support import build, need_tool
from qemu_user import qemu_user

SYSROOT = "/usr/arm-linux-gnueabihf"     # Debian's armhf cross libraries (libc6-armhf-cross)

# Arm and Thumb code at -O0 and -O2: the builds of every ehabi.cpp test (live and offline).
ARM_THUMB = {
    "arm-O0": ["-O0", "-marm"],
    "arm-O2": ["-O2", "-marm"],
    "thumb-O0": ["-O0", "-mthumb"],
    "thumb-O2": ["-O2", "-mthumb"],
}
BUILDS = {
    **ARM_THUMB,
    "arm-O2-fp": ["-O2", "-marm", "-fno-omit-frame-pointer"],
    "thumb-O2-fp": ["-O2", "-mthumb", "-fno-omit-frame-pointer"],
}

def qemu_arm(binary, args, sysroot=None):
    """qemu-arm stopped at the entry point, its gdbstub on a free port: see qemu_user."""
    return qemu_user("qemu-arm", binary, args, sysroot=sysroot)

def arm_program(flags, static=True):
    need_tool("arm-linux-gnueabihf-g++")
    return build("ehabi.cpp", ["-funwind-tables", *(["-static"] if static else []), *flags],
                 name="ehabi-arm", compiler="arm-linux-gnueabihf-g++")
