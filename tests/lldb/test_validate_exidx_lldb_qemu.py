"""`unwind validate` live in LLDB on 32-bit Arm: the planted EHABI errors under qemu-arm (`gdb-remote`).

The same program as tests/gdb/test_validate_exidx_qemu.py (tests/helpers/exidx_live.py): a wrong
`.save`, `.pad` and `.setfp` in Arm code called from a Thumb-2 main. Where each error lies comes
from the assembler's symbols (nm) and objdump's instruction list: each call is wrong at exactly its
planted instruction, and the twin is right at the entry and the call of each function.
"""

import json

from exidx_live import ARM, CALLS, programs
from lldbrun import run_batch
from qemu_arm import qemu_arm
from validate_support import planted_ranges


def _reports(bare):
    with qemu_arm(bare, []) as address:
        status, transcript = run_batch(bare, [
            "gdb-remote %s" % address, "breakpoint set -n stop_here", "continue", "breakpoint delete --force",
            *["unwind validate --json %s" % name for name, _ in CALLS]], timeout=300)
    assert status == 0, transcript
    reports = []
    for name, _ in CALLS:
        text = transcript.split("unwind validate --json %s" % name, 1)[1]
        reports.append(json.JSONDecoder().raw_decode(text[text.index("{"):])[0])
    return reports, transcript


def test_planted_ehabi_errors_found_live_in_lldb_and_twin_clean():
    for correct in (False, True):
        labelled, bare = programs(correct)
        reports, transcript = _reports(bare)
        for (name, number), report in zip(CALLS, reports):
            assert report["function"] == name and report["complete"], (name, transcript[-3000:])
            expected = [] if correct else planted_ranges(labelled, (number,), ARM)
            assert sorted(report["sources"]["exidx"]["wrong"]) == expected, (name, report)
            exidx = report["sources"]["exidx"]
            assert exidx["checked"] == 2 and exidx["right"] == 2 - len(expected), (name, exidx)
