"""32-bit Arm function names in `validate`: a Thumb function's symbol value has bit 0 set, its code
starts at the even address (plugin.validate.sources.function_name). binutils' nm, which prints the
even address, is the oracle, on Debian's armhf libc."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from plugin.file_targets.elf import FileTarget
from plugin.validate.sources import function_name

LIBC = Path("/usr/arm-linux-gnueabihf/lib/libc.so.6")


def test_thumb_functions_are_named_at_their_first_instruction():
    nm = shutil.which("arm-linux-gnueabihf-nm")
    if nm is None or not LIBC.exists():
        pytest.fail("the armhf cross toolchain is missing: run tests/setup.sh")
    listing = subprocess.run([nm, "-D", "--defined-only", str(LIBC)], capture_output=True, text=True,
                             check=True).stdout
    functions = {}
    for address, name in re.findall(r"^([0-9a-f]+) [Tt] ([^@\s]+)", listing, re.M):
        functions.setdefault(int(address, 16), name)
    # the Thumb ones: readelf prints the raw value, odd
    raw = subprocess.run(["readelf", "-W", "--dyn-syms", str(LIBC)], capture_output=True, text=True, check=True).stdout
    odd = {int(v, 16) - 1 for v in re.findall(r"^\s*\d+: ([0-9a-f]+)\s+\d+ FUNC", raw, re.M) if int(v, 16) & 1}
    checked = sorted(a for a in functions if a in odd)[::20]
    assert len(checked) > 50
    symbol = FileTarget(str(LIBC)).symbol
    named = {a: function_name(symbol, a, arm=True) for a in checked}
    names = {a: n for a, n in named.items() if n != functions[a]}
    # another symbol at the same address (an alias nm listed first) is as right
    wrong = {hex(a): (functions[a], n) for a, n in names.items() if symbol(a | 1)[1] != a | 1}
    assert not wrong, list(wrong.items())[:5]
    assert function_name(symbol, checked[0] + 4, arm=True).endswith("+0x4")
