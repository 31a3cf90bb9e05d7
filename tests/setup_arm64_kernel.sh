#!/usr/bin/env bash
# Debian 12's arm64 kernel, booted by qemu-system-aarch64 (TCG) to write a real Linux core of an
# aarch64 process for the matrix's aarch64 core row (tests/helpers/matrix_core_a64.py; issue 31,
# item 5). Fetched with `apt-get download` through a private apt configuration
# ($root/apt/arm64: its own sources.list, lists, cache and dpkg status; the system's apt is not
# touched), as tests/setup_debian_sysroots.sh does, and unpacked (dpkg -x) into
# $root/NAME/deb (default root /opt/unwind-kernel). Idempotent: a kernel unpacked is kept.
set -euo pipefail
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
d="$root/apt/arm64"
opts=(-o APT::Architectures=arm64 -o APT::Architecture=arm64 -o Dir::Etc::SourceList="$d/sources.list"
      -o Dir::Etc::SourceParts="$d/parts" -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache"
      -o Dir::State::Status="$d/status" -o Dir::Etc::Preferences="$d/preferences"
      -o Dir::Etc::PreferencesParts="$d/parts")
$SUDO mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/parts"
printf '%s\n' "deb [arch=arm64] http://deb.debian.org/debian bookworm main" \
    "deb [arch=arm64] http://deb.debian.org/debian-security bookworm-security main" | $SUDO tee "$d/sources.list" >/dev/null
$SUDO touch "$d/status" "$d/preferences"
compgen -G "$d/lists/*_Packages" >/dev/null || $SUDO apt-get "${opts[@]}" update -q
debs="$(mktemp -d)"
chmod 777 "$debs"       # apt's download sandbox user (_apt) writes there
(cd "$debs" && $SUDO apt-get "${opts[@]}" download -q "$image:arm64")
$SUDO rm -rf "$dest.partial"
$SUDO mkdir -p "$dest.partial/deb"
for deb in "$debs"/*.deb; do $SUDO dpkg -x "$deb" "$dest.partial/deb"; done
rm -rf "$debs"
$SUDO mv "$dest.partial" "$dest"
