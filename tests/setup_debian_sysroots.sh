#!/usr/bin/env bash
# Debian 12's own armhf and i386 programs as an oracle (issue 33, item 6):
# coreutils, bash and libc6 of each architecture, downloaded with
# `apt-get download` through a private apt configuration
# ($UNWIND_SYSROOTS/apt/ARCH: its own sources.list, lists, cache and dpkg
# status; APT::Architectures set on the command line, so neither the system's
# sources nor its dpkg architectures are touched; tests/debian_apt.sh) and unpacked (dpkg -x) into
# $UNWIND_SYSROOTS/ARCH (default /opt/unwind-sysroots). qemu-arm -L takes the
# armhf one; i386 programs run natively through the sysroot's own ld.so.
# Idempotent: a sysroot already unpacked is kept; delete it to fetch again.
set -euo pipefail
. "$(dirname "$0")/debian_apt.sh"
root="${UNWIND_SYSROOTS:-/opt/unwind-sysroots}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
packages=(coreutils libc6 bash libtinfo6 libselinux1 libgmp10 libattr1 libacl1 libpcre2-8-0 libssl3 libc6-dbg)
for arch in armhf i386; do
    dest="$root/$arch"
    [ -x "$dest/usr/bin/sort" ] && continue
    echo "setup: unpacking Debian 12 $arch programs into $dest"
    $SUDO rm -rf "$dest.partial"
    debian_fetch "$arch" "$root/apt/$arch" no "$dest.partial" "${packages[@]}"
    $SUDO mv "$dest.partial" "$dest"
done
