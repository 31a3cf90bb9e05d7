"""The corpus' SFrame v3 demo programs (../shared/oracles/sframe-v3-demo), copied for a live run."""

import shutil
import subprocess

from support import need_tool, oracle_dir

STRIP_CFI = ["--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr"]


def demo_copy(tmp_path, arch, stripped, objcopy="objcopy"):
    """sframe_demo_ARCH copied to tmp (never written in the corpus), maybe without its CFI.

    Both copies sit at paths of the same length, so two processes get the
    same stack layout and their sp values can be compared too. objcopy must
    know the program's architecture (the host's knows x86 only).
    """
    folder = tmp_path / ("strip" if stripped else "plain")
    folder.mkdir()
    path = folder / "demo"
    shutil.copy(oracle_dir() / "sframe-v3-demo" / ("sframe_demo_" + arch), path)
    path.chmod(0o755)
    if stripped:
        subprocess.run([need_tool(objcopy), *STRIP_CFI, str(path)], check=True)
    return path


# GDB actions on a demo stopped in stop_here: the plugin's walk by SFrame alone from there
# (`from_stop`) and from the selected `realign` frame (`from_realign`); frame 0 selected again after.
SFRAME_WALKS = [
    ("from_stop", "json", "unwind backtrace -json -sources sframe"),
    ("select", "cmd", "frame function realign"),
    ("from_realign", "json", "unwind backtrace -json -sources sframe"),
    ("select0", "cmd", "frame 0"),
]
