"""qemu-user with its gdbstub on a free loopback port, for the cross-architecture GDB and LLDB tests."""

import contextlib
import socket
import subprocess
import time
import pytest
from support import need_tool


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
def qemu_user(emulator, binary, args, sysroot=None, options=()):
    """qemu-user (`emulator`, e.g. "qemu-arm") stopped at the entry point with its gdbstub on
    a free port; yields "127.0.0.1:PORT". sysroot: where a dynamic executable's loader and
    libraries are (qemu's -L)."""
    program = need_tool(emulator)
    for _ in range(5):
        port = _free_port()
        prefix = ["-L", str(sysroot)] if sysroot else []
        proc = subprocess.Popen([program, *options, *prefix, "-g", str(port), str(binary), *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None and _listening(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("%s did not start its gdbstub: %s" % (emulator, proc.stderr.read().decode(errors="replace")))
    try:
        yield "127.0.0.1:%d" % port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()


def aarch64_static(tmp_path, fixture, name, as_flags=()):
    """(executable, {symbol: address}) of tests/fixtures/FIXTURE assembled for aarch64 and linked static."""
    from elftools.elf.elffile import ELFFile
    from support import FIXTURES
    obj, exe = tmp_path / (name + ".o"), tmp_path / name
    subprocess.run([need_tool("aarch64-linux-gnu-as"), *as_flags, "-o", str(obj), str(FIXTURES / fixture)],
                   check=True)
    subprocess.run([need_tool("aarch64-linux-gnu-ld"), "-static", "--eh-frame-hdr", "-o", str(exe), str(obj)],
                   check=True)
    with open(exe, "rb") as handle:
        symbols = {s.name: s["st_value"] for s in ELFFile(handle).get_section_by_name(".symtab").iter_symbols()}
    return exe, symbols
