#!/usr/bin/env bash
# One virtual environment per Python the plugin supports (3.9, 3.10, 3.12, 3.13), each with the
# project and its test dependencies installed by pip, for tests/pythons/.
#   bash tests/setup_pythons.sh      (tests/setup.sh calls it)
# The interpreters are pyenv's (this machine kind ships 3.9 to 3.13 under $(pyenv root));
# a version that is missing is reported, and tests/pythons/ fails for it in CI.
# Each environment lives in .venv-pythons/X.Y; one already set up is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${PYENV_ROOT:-$HOME/.pyenv}"
for minor in 9 10 12 13; do      # 3.11: the main .venv (the system Python GDB and LLDB embed)
    version="3.$minor"
    dest=".venv-pythons/$version"
    [ -x "$dest/bin/python" ] && "$dest/bin/python" -c "import plugin, elftools, capstone, pytest" 2>/dev/null && continue
    interpreter="$(ls -d "$root"/versions/"$version".*/bin/python"$version" 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -z "$interpreter" ]; then
        echo "setup: no Python $version under $root/versions: its tests in tests/pythons/ cannot run"
        continue
    fi
    echo "setup: Python $version ($interpreter) into $dest"
    rm -rf "$dest"
    "$interpreter" -m venv "$dest"
    "$dest/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]" > "$dest.log" 2>&1 \
        || { cat "$dest.log"; exit 1; }
done
