# Sourced by tests/setup_debian_sysroots.sh and tests/setup_arm64_kernel.sh: Debian 12 packages of
# another architecture, fetched without touching the system's apt or dpkg.
#
# debian_fetch ARCH APT_DIR SECURITY TARGET PACKAGE...
#   Downloads the packages (`apt-get download`) for ARCH through a private apt configuration in
#   APT_DIR (its own sources.list, lists, cache and dpkg status; APT::Architectures set on the
#   command line) and unpacks each (`dpkg -x`) into TARGET. SECURITY "yes" adds
#   bookworm-security to the sources. The lists are fetched once (kept in APT_DIR/lists).
#   Uses $SUDO (empty when run as root).
debian_fetch() {
    local arch="$1" d="$2" security="$3" target="$4"
    shift 4
    local opts=(-o APT::Architectures="$arch" -o APT::Architecture="$arch"
                -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/parts"
                -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o Dir::State::Status="$d/status"
                -o Dir::Etc::Preferences="$d/preferences" -o Dir::Etc::PreferencesParts="$d/parts")
    local sources=("deb [arch=$arch] http://deb.debian.org/debian bookworm main")
    if [ "$security" = yes ]; then
        sources+=("deb [arch=$arch] http://deb.debian.org/debian-security bookworm-security main")
    fi
    $SUDO mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/parts"
    printf '%s\n' "${sources[@]}" | $SUDO tee "$d/sources.list" >/dev/null
    $SUDO touch "$d/status" "$d/preferences"
    compgen -G "$d/lists/*_Packages" >/dev/null || $SUDO apt-get "${opts[@]}" update -q
    local debs deb
    debs="$(mktemp -d)"
    chmod 777 "$debs"       # apt's download sandbox user (_apt) writes there
    (cd "$debs" && $SUDO apt-get "${opts[@]}" download -q "${@/%/:$arch}")
    $SUDO mkdir -p "$target"
    for deb in "$debs"/*.deb; do $SUDO dpkg -x "$deb" "$target"; done
    rm -rf "$debs"
}
