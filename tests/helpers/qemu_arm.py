"""32-bit Arm programs for live tests: ehabi.cpp built static with arm-linux-gnueabihf-g++,
run under `qemu-arm -g PORT` (its gdbstub serves GDB's `target remote` and LLDB's `gdb-remote`)."""

import contextlib
import socket
import subprocess
import time

import pytest

from support import build, need_tool

SYSROOT = "/usr/arm-linux-gnueabihf"     # Debian's armhf cross libraries (libc6-armhf-cross)

BUILDS = {
    "arm-O0": ["-O0", "-marm"],
    "arm-O2": ["-O2", "-marm"],
    "thumb-O0": ["-O0", "-mthumb"],
    "thumb-O2": ["-O2", "-mthumb"],
    "arm-O2-fp": ["-O2", "-marm", "-fno-omit-frame-pointer"],
    "thumb-O2-fp": ["-O2", "-mthumb", "-fno-omit-frame-pointer"],
}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port):
    """Is something listening on TCP port? Read from /proc: qemu's gdbstub serves one connection only."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


@contextlib.contextmanager
def qemu_arm(binary, args, sysroot=None):
    """qemu-arm stopped at the entry point with its gdbstub on a free port; yields "127.0.0.1:PORT".
    sysroot: where a dynamic executable's loader and libraries are (qemu's -L)."""
    program = need_tool("qemu-arm")
    for _ in range(5):
        port = _free_port()
        prefix = ["-L", str(sysroot)] if sysroot else []
        proc = subprocess.Popen([program, *prefix, "-g", str(port), str(binary), *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None and _listening(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("qemu-arm did not start its gdbstub")
    try:
        yield "127.0.0.1:%d" % port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()


def arm_program(flags, static=True):
    need_tool("arm-linux-gnueabihf-g++")
    return build("ehabi.cpp", ["-funwind-tables", *(["-static"] if static else []), *flags],
                 name="ehabi-arm", compiler="arm-linux-gnueabihf-g++")
