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
              golang-go rustc time dejagnu dpkg-dev)
# ^ gcc-12-multilib, not gcc-multilib: the latter conflicts with the Arm cross compilers
#   (gcc -m32 for the i386 tests needs only the former).
#   coreutils..gdbserver: programs tests/gdb/ runs (libc6-dbg: glibc's inline info, also for
#   tests/lldb/test_lldb_native_frames.py); libipt2..libpython3.11: what the unpacked LLDB 19
#   and 22 (below) need at run time; golang-go, rustc: the runtime matrix (tests/gdb/test_runtimes.py);
#   dejagnu, dpkg-dev: GDB's own testsuite (runtest; dpkg-source unpacks its source, below);
#   clang-16, lld-16 (lld-link-16), llvm-16 (llvm-readobj-16): the PE images of tests/fixtures/pe/
#   and their oracle (pefile, the x64 cross-check, is in the [test] extra);
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

# Debian's kernels (images and their objtool) for the ORC tests, under /opt/unwind-kernel.
if [ "${1:-all}" != demo ]; then
    bash tests/setup_kernel.sh
fi

# Debian 12's arm64 kernel and qemu-system-aarch64: Linux writes the core of the matrix's
# aarch64 core row (tests/helpers/matrix_core.py; private apt configuration, see the script).
if [ "${1:-all}" != demo ]; then
    bash tests/setup_arm64_kernel.sh
fi

# A virtual environment per supported Python for tests/pythons/ (3.9 to 3.13, from pyenv).
if [ "${1:-all}" != demo ]; then
    bash tests/setup_pythons.sh
fi

# GDB 10.1 (Debian 11) and 16.3 (Debian 13) beside the system's GDB 13.1.
# Each is downloaded with the dependencies its suite declares, through a
# private apt configuration ($gdb_root/apt/SUITE: its own sources.list, lists
# and cache; the system's sources are not touched), and unpacked (dpkg -x)
# into $UNWIND_GDB_ROOT/N (default /opt/unwind-gdb/N). GDB 16 needs trixie's
# libc, so it runs through its own unpacked loader; GDB 10 runs on the
# system's loader and libc with bullseye's libraries (libpython3.9 and the
# rest) first on the library path. $gdb_root/N/bin/gdb and gdb-multiarch are
# the wrappers tests call (tests/helpers/gdbversions.py): loader, library
# path, PYTHONHOME for GDB's Python, unset again for the program debugged.
# pyelftools, capstone and zstandard for each GDB's Python are wheels for its
# version, installed by pip --target into the dist-packages that Python reads.
# A version already unpacked is kept; delete its folder to fetch it again.
gdb_root="${UNWIND_GDB_ROOT:-/opt/unwind-gdb}"
private_apt() {     # private_apt NAME apt-command...: apt run on $gdb_root/apt/NAME only
    local d="$gdb_root/apt/$1"; shift
    "$@" -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/parts" \
         -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o Dir::State::Status="$d/status"
}
private_apt_update() {     # private_apt_update NAME "sources.list line"
    local d="$gdb_root/apt/$1"
    $SUDO mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/parts"
    echo "$2" | $SUDO tee "$d/sources.list" >/dev/null
    $SUDO touch "$d/status"
    compgen -G "$d/lists/*_Packages" >/dev/null || compgen -G "$d/lists/*_Sources" >/dev/null \
        || private_apt "$1" $SUDO apt-get update -q
}
if [ "${1:-all}" != demo ]; then
    for spec in 10:bullseye:3.9 16:trixie:3.13; do
        IFS=: read -r version suite python <<<"$spec"
        dest="$gdb_root/$version"
        [ -x "$dest/bin/gdb" ] && continue
        echo "setup: unpacking GDB $version ($suite) into $dest"
        private_apt_update "$suite" "deb http://deb.debian.org/debian $suite main"
        closure=$(private_apt "$suite" apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                  --no-breaks --no-replaces --no-enhances gdb gdb-multiarch | grep '^[a-z0-9]' | sort -u)
        # GDB 10 keeps the system's libc (its loader runs it); GDB 16 brings trixie's.
        [ "$version" = 10 ] && closure=$(echo "$closure" | grep -vx 'libc6')
        debs="$(mktemp -d)"
        chmod 777 "$debs"
        (cd "$debs" && private_apt "$suite" $SUDO apt-get download -q $closure)
        $SUDO rm -rf "$dest.partial"
        $SUDO mkdir -p "$dest.partial/bin"
        for deb in "$debs"/*.deb; do $SUDO dpkg -x "$deb" "$dest.partial"; done
        rm -rf "$debs"
        site="$dest.partial/usr/lib/python3/dist-packages"
        .venv/bin/python -m pip install -q --disable-pip-version-check --target "$site" --only-binary=:all: \
            --python-version "$python" --implementation cp --platform manylinux2014_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
            "pyelftools>=0.29" "capstone>=5" "zstandard>=0.19"
        loader="/lib64/ld-linux-x86-64.so.2"
        if [ "$version" != 10 ]; then       # the file, not the /lib64 link (absolute: the system's)
            for dir in usr/lib lib; do
                [ -f "$dest.partial/$dir/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] && break
            done
            loader="$dest/$dir/x86_64-linux-gnu/ld-linux-x86-64.so.2"
            # GDB loads the libthread_db matching the program's libc (the system's, 2.36):
            # without trixie's copy on its library path, its first try (dlopen) finds that one.
            $SUDO rm -f "$dest.partial/$dir/x86_64-linux-gnu/libthread_db".so*
        fi
        for program in gdb gdb-multiarch; do
            $SUDO tee "$dest.partial/bin/$program" >/dev/null <<WRAPPER
#!/bin/sh
# GDB $version ($suite), unpacked by tests/setup.sh: its own libraries and Python.
here=$dest
export PYTHONHOME=\$here/usr
exec $loader \\
    --library-path \$here/lib/x86_64-linux-gnu:\$here/usr/lib/x86_64-linux-gnu \\
    \$here/usr/bin/$program -data-directory \$here/usr/share/gdb -iex "unset environment PYTHONHOME" "\$@"
WRAPPER
            $SUDO chmod 755 "$dest.partial/bin/$program"
        done
        $SUDO mv "$dest.partial" "$dest"
        "$dest/bin/gdb" -nx -batch -ex "python import sys, elftools, capstone; print(sys.version)" -ex "show version"
    done
fi

# Debian 12's own armhf and i386 coreutils, bash and libc6, unpacked as sysroots for
# tests/emulated/test_debian_programs_qemu.py (private apt configuration; see the script).
if [ "${1:-all}" != demo ]; then
    bash tests/setup_debian_sysroots.sh
fi

# GDB's own testsuite, from Debian's source package of the system's GDB
# (tests/gdb/test_gdb_testsuite.py runs part of it with and without the
# plugin). The source comes through a private apt configuration with one
# deb-src line (the system's sources are not touched); only gdb/testsuite
# is configured (`./configure && make site.exp`: nothing of GDB is built),
# in $UNWIND_GDB_ROOT/testsuite/gdb-VERSION.
if [ "${1:-all}" != demo ]; then
    gdb_version=$(dpkg-query -W -f='${Version}' gdb)
    suite_dir="$gdb_root/testsuite"
    testsuite="$suite_dir/gdb-$gdb_version/gdb/testsuite"
    if [ ! -d "$testsuite" ]; then
        echo "setup: GDB $gdb_version's testsuite into $suite_dir"
        private_apt_update bookworm-src "deb-src http://deb.debian.org/debian bookworm main"
        $SUDO rm -rf "$suite_dir.partial"
        $SUDO mkdir -p "$suite_dir.partial"
        chmod 777 "$suite_dir.partial"
        (cd "$suite_dir.partial" && private_apt bookworm-src apt-get source -q --download-only "gdb=$gdb_version" \
            && dpkg-source --no-check -x gdb_*.dsc "gdb-$gdb_version" >/dev/null && rm -f gdb_*.tar.* gdb_*.dsc)
        $SUDO rm -rf "$suite_dir"
        $SUDO mv "$suite_dir.partial" "$suite_dir"
    fi
    [ -f "$testsuite/site.exp" ] || (cd "$testsuite" && $SUDO ./configure -q && $SUDO make -s site.exp)
fi
