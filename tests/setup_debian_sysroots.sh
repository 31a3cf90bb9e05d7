#!/usr/bin/env bash
# Debian 12's own armhf, i386 and arm64 programs as an oracle (issue 33, item 6):
# coreutils, bash, python3.11 and libc6 of each architecture, downloaded with
# `apt-get download` through a private apt configuration
# ($UNWIND_SYSROOTS/apt/ARCH: its own sources.list, lists, cache and dpkg
# status; APT::Architectures set on the command line, so neither the system's
# sources nor its dpkg architectures are touched; tests/debian_apt.sh) and unpacked (dpkg -x) into
# $UNWIND_SYSROOTS/ARCH (default /opt/unwind-sysroots). qemu-arm -L takes the
# armhf one, qemu-aarch64 -L the arm64 one; i386 programs run natively through the sysroot's own ld.so.
# Idempotent: a sysroot unpacked from the same package list ($dest/.packages) is kept.
set -euo pipefail
. "$(dirname "$0")/debian_apt.sh"
root="${UNWIND_SYSROOTS:-/opt/unwind-sysroots}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
packages=(coreutils libc6 bash libtinfo6 libselinux1 libgmp10 libattr1 libacl1 libpcre2-8-0 libssl3 libc6-dbg
          python3.11-minimal libpython3.11-minimal zlib1g libexpat1 libgcc-s1)
for arch in armhf i386 arm64; do
    dest="$root/$arch"
    [ "$(cat "$dest/.packages" 2>/dev/null)" = "${packages[*]}" ] && continue
    echo "setup: unpacking Debian 12 $arch programs into $dest"
    $SUDO rm -rf "$dest.partial"
    debian_fetch "$arch" "$root/apt/$arch" no "$dest.partial" "${packages[@]}"
    echo "${packages[*]}" | $SUDO tee "$dest.partial/.packages" >/dev/null
    $SUDO rm -rf "$dest"
    $SUDO mv "$dest.partial" "$dest"
done
