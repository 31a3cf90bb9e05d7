"""Debian 12's own programs unpacked as sysroots (tests/setup_debian_sysroots.sh), one per architecture."""

import os
import subprocess
from pathlib import Path

ROOT = Path(os.environ.get("UNWIND_SYSROOTS", "/opt/unwind-sysroots"))
SETUP = Path(__file__).resolve().parents[1] / "setup_debian_sysroots.sh"


def sysroot(arch):
    """The sysroot of Debian's `arch` (armhf, i386, arm64) programs, set up on first use."""
    if not (ROOT / arch / "usr/bin/sort").exists() or not (ROOT / arch / "usr/bin/python3.11").exists():
        subprocess.run(["bash", str(SETUP)], check=True)
    return ROOT / arch
