"""Run inside GDB stopped in a kernel (QEMU's gdbstub): walk the stack with the
plugin's ORC rules over the vmlinux in $ORC_VMLINUX and print one JSON line
`ORC-WALK [[pc, outcome, type, sp_reg, sp], ...]`. For tests/realworld/test_orc_qemu.py."""
import io
import json
import os
import sys

sys.path[:0] = [p for p in os.environ.get("ORC_SYS_PATH", "").split(":") if p]

import gdb  # noqa: E402
from elftools.elf.elffile import ELFFile  # noqa: E402

from plugin.formats.orc_rules import Frame, Outcome, step, word_reader  # noqa: E402
from plugin.file_targets.orc import OrcImage  # noqa: E402

with open(os.environ["ORC_VMLINUX"], "rb") as handle:
    data = handle.read()
table = OrcImage(ELFFile(io.BytesIO(data)), data).table()
inferior = gdb.selected_inferior()
read = word_reader(lambda address, size: bytes(inferior.read_memory(address, size)))
value = lambda name: int(gdb.parse_and_eval("$" + name)) & 0xFFFFFFFFFFFFFFFF     # noqa: E731
frame = Frame(value("rip"), value("rsp"), value("rbp"))
walk = []
for _ in range(64):
    result = step(table, frame, read)
    entry = result.entry
    walk.append([frame.pc, result.outcome.value, entry.type.value if entry else None,
                 entry.sp_reg if entry else None, frame.sp])
    if result.outcome not in (Outcome.CALLER, Outcome.INTERRUPTED):
        break
    frame = result.caller
print("ORC-WALK " + json.dumps(walk))
