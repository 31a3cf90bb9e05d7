"""Debian 12's own programs unpacked as sysroots (tests/setup_debian_sysroots.sh), one per architecture."""

import os
import subprocess
from pathlib import Path

ROOT = Path(os.environ.get("UNWIND_SYSROOTS", "/opt/unwind-sysroots"))
SETUP = Path(__file__).resolve().parents[1] / "setup_debian_sysroots.sh"


_checked = []


def sysroot(arch):
    """The sysroot of Debian's `arch` (armhf, i386, arm64) programs: the setup script runs once per
    session (it keeps a sysroot unpacked from its current package list, and fetches the rest)."""
    if not _checked:
        subprocess.run(["bash", str(SETUP)], check=True)
        _checked.append(True)
    return ROOT / arch
