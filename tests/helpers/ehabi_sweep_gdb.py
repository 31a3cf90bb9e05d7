"""Runs inside GDB (imported by a "py" action of tests/helpers/gdb_driver.py): `unwind validate` at
the first call of each function named, until the program calls `exit`.

Each function gets a breakpoint; at each stop all breakpoints are disabled while the function is
stepped (a nested one would interrupt it), then those not yet hit are enabled again. The process is
left stopped at `exit`, alive."""

import json
import time

import gdb


def sweep(functions, seconds=300):
    """[validate's JSON report (or {"error", "pc"})] of each function, in the order first called."""
    for name in functions:
        try:
            gdb.Breakpoint(name)
        except gdb.error:         # not a function of this program
            pass
    end = gdb.Breakpoint("exit")
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            gdb.execute("continue", to_string=True)
        except gdb.error:
            break
        if not gdb.selected_inferior().threads() or end.hit_count:
            break
        for point in gdb.breakpoints():
            point.enabled = False
        try:
            out.append(json.loads(gdb.execute("unwind validate -json", to_string=True)))
        except gdb.error as exc:
            out.append({"error": str(exc), "pc": gdb.newest_frame().pc()})
        for point in gdb.breakpoints():
            point.enabled = not point.hit_count
    for point in gdb.breakpoints():
        point.delete()
    return out
