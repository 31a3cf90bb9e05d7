#!/usr/bin/env bash
# Debian's kernels for the ORC tests (tests/realworld/test_orc_kernel.py, test_orc_qemu.py), as root.
# Called by tests/setup.sh; idempotent: a kernel already unpacked is kept
# (delete its folder under $UNWIND_KERNEL_ROOT, default /opt/unwind-kernel, to fetch it again).
#   $root/NAME/deb/...   the image and kbuild packages unpacked (dpkg -x): vmlinuz, objtool
#   $root/NAME/vmlinux   the ELF extracted from the bzImage (tests/helpers/extract_vmlinux.py)
# NAME is the package's kernel release: 6.1.0-50-amd64 (ORC layout of 6.1, no .orc_header)
# and 6.12.107+deb12-amd64 (layout of 6.4 on, with .orc_header).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
root="${UNWIND_KERNEL_ROOT:-/opt/unwind-kernel}"
# QEMU boots the kernel (TCG) for tests/realworld/test_orc_qemu.py; busybox is its initramfs.
for p in qemu-system-x86 busybox-static; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends qemu-system-x86 busybox-static
    break
done
python=.venv/bin/python
[ -x "$python" ] || python=python3
for spec in "6.1.0-50-amd64:linux-image-6.1.0-50-amd64=6.1.176-1:linux-kbuild-6.1=6.1.176-1" \
            "6.12.107+deb12-amd64:linux-image-6.12.107+deb12-amd64-unsigned:linux-kbuild-6.12.107+deb12"; do
    IFS=: read -r name image kbuild <<<"$spec"
    dest="$root/$name"
    [ -f "$dest/vmlinux" ] && continue
    echo "setup: kernel $name into $dest"
    debs="$(mktemp -d)"
    chmod 777 "$debs"       # apt's download sandbox user (_apt) writes there
    if ! (cd "$debs" && $SUDO apt-get download -q "$image" "$kbuild"); then
        $SUDO apt-get update -q
        (cd "$debs" && $SUDO apt-get download -q "$image" "$kbuild")
    fi
    $SUDO rm -rf "$dest.partial"
    $SUDO mkdir -p "$dest.partial/deb"
    for deb in "$debs"/*.deb; do $SUDO dpkg -x "$deb" "$dest.partial/deb"; done
    rm -rf "$debs"
    $SUDO "$python" tests/helpers/extract_vmlinux.py "$dest.partial/deb/boot/vmlinuz-$name" "$dest.partial/vmlinux"
    $SUDO rm -rf "$dest"
    $SUDO mv "$dest.partial" "$dest"
done
