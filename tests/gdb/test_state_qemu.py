"""A call through a null function pointer on aarch64, live under qemu-aarch64 and
gdb-multiarch (issue 19 item 2): frame 0 at pc 0, its caller from the link
register. Oracle: GDB's own frames (the plugin's unwinder disabled) and the
fixture's labels. Set-up as in tests/gdb/test_aarch64_qemu.py."""

from gdb_actions import native_frames
from gdbrun import run_gdb
from qemu_user import aarch64_static, qemu_user


def _program(tmp_path):
    return aarch64_static(tmp_path, "null_call_aarch64.S", "null")


def test_null_call_on_aarch64_takes_the_caller_from_the_link_register(tmp_path):
    exe, symbols = _program(tmp_path)
    with qemu_user("qemu-aarch64", exe, (), options=("-cpu", "max,sve=off")) as address:
        results, transcript = run_gdb(exe, [
            ("walk", "json", "unwind backtrace -json"),
            ("explain", "json", "unwind explain -json 1"),
            *native_frames(),
        ], breakpoint=None, gdb_program="gdb-multiarch", remote=address, timeout=300)
    frames = results["walk"]["frames"]
    expected = [0, symbols["ret_in_call_null"], symbols["ret_in_start"]]
    assert [f["pc"] for f in frames] == expected, (frames, transcript[-3000:])
    native = results["native"]
    assert [(f["pc"], f["sp"]) for f in native] == [(f["pc"], f["sp"]) for f in frames]
    evidence = results["explain"]["frames"][0]["evidence"]
    assert evidence["found_by"] == "frame pointer: call to a non-code address"
    assert any("in x30" in note for note in evidence["notes"]), evidence["notes"]
    assert results["walk"]["stop_reason"] == "outermost"
