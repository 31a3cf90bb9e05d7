"""A core of an aarch64 program written by a real Linux kernel, for the matrix's aarch64 core row.

qemu-user's cores have no NT_FILE list and no code, and gdb-multiarch's `gcore` through
its gdbstub keeps 64 bytes of stack, so Debian 12's arm64 kernel (tests/setup_arm64_kernel.sh)
boots under qemu-system-aarch64 (TCG) with an initramfs of two files: /init
(tests/fixtures/core_init.c, static) and the program at its own host path, so the core's
NT_FILE names the file GDB and the plugin find on the host. /init runs it with
RLIMIT_CORE unlimited; its `brk` in stop_here (SIGTRAP) dumps the core, which /init writes to the
console in hex. Made once per program (the file name holds a hash of the program, /init's
source and the kernel), in bounded time (BOOT_TIMEOUT).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from support import BUILD, FIXTURES, need_tool

KERNEL = "6.1.0-50-arm64"
KERNEL_ROOT = Path(os.environ.get("UNWIND_KERNEL_ROOT", "/opt/unwind-kernel"))
INIT = FIXTURES / "core_init.c"
BOOT_TIMEOUT = 300      # seconds for the boot, the dump and the hex lines


def kernel_image() -> Path:
    image = KERNEL_ROOT / KERNEL / "deb/boot" / ("vmlinuz-" + KERNEL)
    if not image.is_file():
        raise AssertionError("%s is missing: run `bash tests/setup.sh` (tests/setup_arm64_kernel.sh)" % image)
    return image


def kernel_core(binary: Path, mode: str) -> Path:
    """The core of `binary mode` dumped by Linux on aarch64 (cached under tests/.build)."""
    image = kernel_image()
    inputs = binary.read_bytes() + INIT.read_bytes() + ("%s %s %s" % (binary, mode, KERNEL)).encode()
    key = hashlib.sha256(inputs).hexdigest()
    out = BUILD / ("%s.%s.linux-%s.core" % (binary.name, mode, key[:12]))
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(prefix="unwind-core-") as tmp:
        initrd = _initrd(Path(tmp), binary)
        serial = Path(tmp) / "serial.txt"
        command = [need_tool("qemu-system-aarch64"), "-M", "virt", "-cpu", "cortex-a57", "-m", "512",
                   "-nographic", "-no-reboot", "-kernel", str(image), "-initrd", str(initrd),
                   "-append", "console=ttyAMA0 nokaslr rdinit=/init panic=-1 quiet -- %s %s" % (binary, mode),
                   "-serial", "file:%s" % serial, "-monitor", "none", "-display", "none"]
        try:
            subprocess.run(command, capture_output=True, timeout=BOOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("qemu-system-aarch64 did not power off in %d s: %s"
                                 % (BOOT_TIMEOUT, serial.read_text(errors="replace")[-2000:])) from None
        text = serial.read_text(errors="replace")
    if "CORE-BEGIN" not in text or "CORE-END" not in text:
        raise AssertionError("no core on the console: %s" % text[-2000:])
    body = text.split("CORE-BEGIN", 1)[1].split("CORE-END", 1)[0]
    data = bytes.fromhex("".join(line.strip() for line in body.splitlines()))
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".tmp%d" % os.getpid())
    tmp_out.write_bytes(data)
    tmp_out.rename(out)
    return out


def _initrd(tmp: Path, binary: Path) -> Path:
    root = tmp / "root"
    root.mkdir()
    subprocess.run([need_tool("aarch64-linux-gnu-gcc"), "-O2", "-static", "-o", str(root / "init"), str(INIT)],
                   check=True, capture_output=True)
    inside = root / str(binary).lstrip("/")
    inside.parent.mkdir(parents=True)
    shutil.copy2(binary, inside)
    names = subprocess.run(["find", "."], cwd=str(root), capture_output=True, check=True).stdout
    archive = subprocess.run([need_tool("busybox"), "cpio", "-o", "-H", "newc"], cwd=str(root), input=names,
                             capture_output=True, check=True).stdout
    (tmp / "initrd").write_bytes(archive)
    return tmp / "initrd"
