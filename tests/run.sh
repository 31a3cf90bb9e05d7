#!/usr/bin/env bash
# Set everything up, then run the whole test suite (this is what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
if [ -n "${CI:-}" ] && [ ! -f "${UNWIND_ORACLES:-../shared/oracles}/MANIFEST.md" ]; then
    echo "CI: the oracle corpus (../shared/oracles) is missing; refusing to skip its tests" >&2
    exit 1
fi
exec .venv/bin/python -m pytest -q -n 2 --durations=30 "$@" tests
