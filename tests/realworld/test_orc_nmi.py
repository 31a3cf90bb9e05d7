"""GDB's own `bt` across the kernel's NMI stack, against the kernel's own trace of the same stop.

Debian's kernel under QEMU (TCG, nokaslr; tests/realworld/test_orc_qemu.py boots it the same way)
with `kernel.unknown_nmi_panic` set by /init, which then runs `cat /proc/version` (the marker) and
sleeps. GDB, past the marker, injects an NMI through QEMU's monitor (`monitor nmi`) and stops at
`panic`, which the NMI handler calls for an NMI of unknown reason. The NMI runs on its own stack
(the cpu_entry_area's, above the task stacks), so the frame it interrupted has a CFA below the
NMI entry code's: GDB takes such a caller of a normal frame for a corrupt stack ("previous frame
inner to this frame") unless the plugin raises its frame ids there (gdb_unwinder/frame_ids.py).
The truth is the kernel's own ORC unwinder: the trace the panic prints, its frames inside <NMI>,
the interrupted pc of its `RIP: 0010:` line, then the task's frames.
"""
import re

import pytest

from support import every
import test_orc_qemu as qemu

RELEASES = sorted(qemu.RELEASES) if every("UNWIND_ORC_EVERY") else ["6.1.0-50-amd64"]

NMI_INIT = """#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
if [ -n "$unwindsyms" ]; then /bin/busybox cat /proc/kallsyms; echo KALLSYMS-DONE; exit 0; fi
echo 1 > /proc/sys/kernel/unknown_nmi_panic
/bin/busybox cat /proc/version
/bin/busybox sleep 30
"""


def _kernel_trace(serial):
    """[(name, symbol+offset)] of the panic's Call Trace: the frames it is sure of (no `?` lines),
    with the interrupted pc of the NMI's `RIP: 0010:` line in its place, up to </TASK>."""
    trace = serial.split("Call Trace:", 1)[1].split("</TASK>", 1)[0]
    frames = []
    for line in trace.splitlines():
        rip = re.search(r"RIP: 0010:(\S+)/0x[0-9a-f]+$", line)
        frame = re.search(r"\]  (?!\? )([^\s<]\S*)/0x[0-9a-f]+$", line)
        found = rip or frame
        if found:
            frames.append((found.group(1).split("+")[0], found.group(1)))
    return frames


@pytest.mark.parametrize("release", RELEASES)
def test_gdb_bt_goes_on_past_the_nmi_stack_as_the_kernels_trace_does(release, tmp_path):
    root = qemu.KERNELS / release
    qemu._tools(root)
    initrd = qemu._initrd(tmp_path, NMI_INIT)
    symbols, symbol_file, _ = qemu._first_boot(root, initrd, tmp_path)
    serial = tmp_path / "serial.txt"
    gdb = qemu._gdb_on_qemu(root, initrd, serial, symbol_file,
                            ["hbreak *0x%x" % symbols[qemu.MARKER], "continue", "delete", "finish",
                             "hbreak *0x%x" % symbols["panic"], "monitor nmi", "continue",
                             "echo BT-START\\n", "bt", "echo BT-END\\n",
                             # GDB finds a frame past the crossing by its id again: `frame N`, then `up`
                             "frame 7", "echo SELECTED-7 \\n", "p/x $pc", "up", "echo UP-8 \\n", "p/x $pc",
                             "echo EXPLAIN-START\\n", "unwind explain all", "echo EXPLAIN-END\\n",
                             "delete", "continue"], settle=60)
    out = gdb.stdout
    print(out[-5000:])
    text = serial.read_text(errors="replace").replace("\r", "")
    assert "NMI: Not continuing" in text and "<NMI>" in text, text[-3000:]
    kernel = _kernel_trace(text)
    names = [name for name, _ in kernel]
    assert "end_repeat_nmi" in names, kernel
    truth = names[names.index("panic"):]
    (bt,) = qemu._gdb_bt(out)
    ours = [name for _, name in bt]
    assert ours == [re.sub(r"\.\d+$", "", name) for name in truth], (ours, truth)
    # the frame the NMI interrupted: GDB's pc is the kernel's RIP (its exact pc, not a return address)
    crossing = ours.index("end_repeat_nmi") + 1
    rip = kernel[names.index("end_repeat_nmi") + 1][1]
    function, offset = rip.split("+")
    assert bt[crossing][0] == symbols[function] + int(offset, 16), (bt[crossing], rip)
    assert crossing < len(bt) - 2           # task frames after it, past the point GDB stopped at before
    pcs = re.findall(r"^(?:SELECTED-7|UP-8) \n\$\d+ = (0x[0-9a-f]+)$", out, re.M)
    assert [int(pc, 16) for pc in pcs] == [bt[7][0], bt[8][0]], out[-2000:]
    assert "inner to this frame" not in out
    # `unwind explain` says which frames' ids were raised: from the frame past the crossing on
    explain = out.split("EXPLAIN-START\n", 1)[1].split("EXPLAIN-END", 1)[0]
    raised = [int(block[1:].split(" ", 1)[0]) for block in re.split(r"\n(?=#\d+ )", explain)
              if block.startswith("#") and "GDB's frame id: 0x" in block]
    assert raised and raised[0] == crossing and raised == list(range(crossing, crossing + len(raised))), explain
