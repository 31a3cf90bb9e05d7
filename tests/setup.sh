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
              qemu-user gdb-multiarch binutils-aarch64-linux-gnu gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf gcc-12-multilib libc6-dev-i386
              gcc-aarch64-linux-gnu
              coreutils perl bash git sqlite3 tar gzip xz-utils make apt libc6-dbg gdbserver
              libipt2 libz3-4 libcurl4 libedit2 libxml2 libzstd1 libffi8 libpython3.11
              golang-go rustc time)
# ^ gcc-12-multilib, not gcc-multilib: the latter conflicts with the Arm cross compilers
#   (gcc -m32 for the i386 tests needs only the former).
#   coreutils..gdbserver: programs tests/gdb/ runs (libc6-dbg: glibc's inline info, also for
#   tests/lldb/test_lldb_native_frames.py); libipt2..libpython3.11: what the unpacked LLDB 19
#   and 22 (below) need at run time; golang-go, rustc: the runtime matrix (tests/gdb/test_runtimes.py);
#   time: /usr/bin/time measures the sweep's and benchmarks' children (tests/realworld/sweep_tables.py)
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

# LLDB 19 and 22 beside the system's LLDB 16. Their python3-lldb-N packages
# conflict with each other (and with python3-lldb-16), so installing one
# would remove the user's other LLDB. Instead their debs are downloaded and
# unpacked (dpkg -x) into $UNWIND_LLDB_ROOT/N (default /opt/unwind-lldb/N),
# untouched by dpkg: usr/lib/llvm-N/bin/lldb, its lldb-server, and the
# Python module at the path `lldb -P` prints, used with
# LD_LIBRARY_PATH=$UNWIND_LLDB_ROOT/N/usr/lib/x86_64-linux-gnu (libLLVM).
# tests/helpers/lldbrun.py finds them there. A version already unpacked is
# kept; delete its folder to fetch it again.
if [ "${1:-all}" != demo ]; then
    lldb_root="${UNWIND_LLDB_ROOT:-/opt/unwind-lldb}"
    for version in 19 22; do
        dest="$lldb_root/$version"
        [ -x "$dest/usr/lib/llvm-$version/bin/lldb" ] && continue
        echo "setup: unpacking LLDB $version into $dest"
        debs="$(mktemp -d)"
        chmod 777 "$debs"       # apt's download sandbox user (_apt) writes there
        (cd "$debs" && $SUDO apt-get download -q "lldb-$version" "liblldb-$version" "python3-lldb-$version" \
            "libllvm$version" "libclang-cpp$version")
        $SUDO rm -rf "$dest.partial"
        $SUDO mkdir -p "$dest.partial"
        for deb in "$debs"/*.deb; do $SUDO dpkg -x "$deb" "$dest.partial"; done
        # The module's _lldb link points at liblldb.so, which only the -dev package ships.
        lib="$dest.partial/usr/lib/llvm-$version/lib"
        [ -e "$lib/liblldb.so" ] || $SUDO ln -s liblldb.so.1 "$lib/liblldb.so"
        $SUDO mv "$dest.partial" "$dest"
        rm -rf "$debs"
        LD_LIBRARY_PATH="$dest/usr/lib/x86_64-linux-gnu" "$dest/usr/lib/llvm-$version/bin/lldb" --version
    done
fi

# A virtual environment per supported Python for tests/pythons/ (3.9 to 3.13, from pyenv).
if [ "${1:-all}" != demo ]; then
    bash tests/setup_pythons.sh
fi
