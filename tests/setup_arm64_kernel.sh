#!/usr/bin/env bash
# Debian 12's arm64 kernel, booted by qemu-system-aarch64 (TCG) to write a real Linux core of an
# aarch64 process for the matrix's aarch64 core row (tests/helpers/matrix_core.py; issue 31,
# item 5). Fetched with `apt-get download` through a private apt configuration
# ($root/apt/arm64: its own sources.list, lists, cache and dpkg status; the system's apt is not
# touched; tests/debian_apt.sh, shared with tests/setup_debian_sysroots.sh), and unpacked (dpkg -x) into
# $root/NAME/deb (default root /opt/unwind-kernel). Idempotent: a kernel unpacked is kept.
set -euo pipefail
. "$(dirname "$0")/debian_apt.sh"
root="${UNWIND_KERNEL_ROOT:-/opt/unwind-kernel}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
dpkg-query -W -f='${Status}' qemu-system-arm 2>/dev/null | grep -q "install ok installed" || {
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends qemu-system-arm
}
name=6.1.0-50-arm64
image="linux-image-$name"
dest="$root/$name"
[ -f "$dest/deb/boot/vmlinuz-$name" ] && exit 0
echo "setup: kernel $name into $dest"
$SUDO rm -rf "$dest.partial"
debian_fetch arm64 "$root/apt/arm64" yes "$dest.partial/deb" "$image"
$SUDO mv "$dest.partial" "$dest"
