#!/usr/bin/env bash
# Install everything the plugin and its tests need on Debian 12, as root.
#   bash tests/setup.sh          everything: debuggers, compilers, oracle tools, Python packages
#   bash tests/setup.sh demo     only what the GDB demo needs
# Idempotent: packages already installed are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

demo_packages=(gdb gcc libc6-dev binutils python3 python3-venv python3-pip)
all_packages=("${demo_packages[@]}" g++ make file bzip2 lldb-16 python3-lldb-16 liblldb-16-dev
              llvm-16 clang-16 lld-16 llvm-22
              qemu-user gdb-multiarch binutils-aarch64-linux-gnu gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf
              coreutils perl bash git sqlite3 tar gzip xz-utils make apt libc6-dbg gdbserver)   # programs tests/gdb/ runs
if [ "${1:-all}" = demo ]; then packages=("${demo_packages[@]}"); else packages=("${all_packages[@]}"); fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# A virtual environment made from the system Python, the one GDB and LLDB
# embed; --system-site-packages lets it see Debian's lldb module.
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
extras=""
if [ "${1:-all}" != demo ]; then extras="[test]"; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras}"
