"""The plugin on aarch64, live: the static demo under `qemu-aarch64 -g PORT` and gdb-multiarch.

Oracle: GDB's own frames (plugin's unwinder disabled) at `stop_here`.

Set-up notes, learned the hard way:
- qemu is started with `-cpu max,sve=off`. With SVE on (qemu's default
  `max`), GDB 13 cannot read qemu's signal frame ("Invalid vector length in
  signal frame 4 vs 16") and its own bt ends at frame 0, leaving no oracle.
  Pointer authentication stays on.
- qemu 7.2's user-mode gdbstub listens on the port on every interface (it
  has no option to bind to loopback); GDB connects to 127.0.0.1 only.
  The port is a free one picked at test time; qemu is always killed.
- There is no /proc for the debuggee: GdbTarget finds the static
  executable from GDB's entry point (header = load bias 0 + lowest PT_LOAD
  vaddr 0x400000), and treats memory outside the modules as code when it is
  readable (qemu's signal trampoline page is in no module).

What "the same pcs" means here with `-sources sframe`: as on x86_64 (see
test_sframe_gdb.py), the runs of frames whose callees have SFrame. From
`stop_here` the walk reaches qemu's signal trampoline (its return address
is in the link register: the SFrame row says RA is not saved) and stops
there: the trampoline page has no tables at all, so the plugin cannot go
through it with any source, and GDB's bt uses its own sigtramp unwinder for
that frame. From `realign` it goes down to main and main's return address.
"""

from gdb_actions import SIGNAL, native_frames
from gdbrun import run_gdb
from sframe_demo import SFRAME_WALKS, demo_copy
from qemu_user import aarch64_static, qemu_user
from support import pcs


def run_under_qemu(binary, actions, args=("2",)):
    with qemu_user("qemu-aarch64", binary, args, options=("-cpu", "max,sve=off")) as address:
        return run_gdb(binary, actions, args=(), setup=SIGNAL, gdb_program="gdb-multiarch",
                       remote=address, timeout=300)


def test_demo_under_qemu_sframe_walks_match_gdb(tmp_path):
    demo = demo_copy(tmp_path, 'aarch64', stripped=False, objcopy="aarch64-linux-gnu-objcopy")
    results, transcript = run_under_qemu(demo, [
        ("arch", "py", "gdb.selected_frame().architecture().name()"),
        ("modules", "json", "unwind modules -json"),
        ("enabled", "frames", None),
        ("tables", "json", "unwind tables -json realign"),
        *SFRAME_WALKS,
        *native_frames(),
    ])
    assert results["arch"] == "aarch64"
    native = results["native"]
    names = [f["name"] for f in native]
    assert names[0] == "stop_here" and "realign" in names and names[-1] == "main", transcript

    # The static executable is found without /proc.
    (module,) = results["modules"]["modules"]
    assert (module["name"], module["base"], module["load_bias"], module["arch"]) == \
        ("demo", 0x400000, 0, "aarch64")
    assert module["tables"][".sframe"]["found_by"] == "PT_GNU_SFRAME"
    assert module["tables"][".sframe"]["address"] == 0x47d358

    # GDB's bt with the plugin's unwinder on is GDB's own.
    assert pcs(results["enabled"]) == pcs(native)

    # stop_here -> qemu's signal trampoline (RA still in x30), then nothing has tables.
    ours = results["from_stop"]
    assert pcs(ours["frames"]) == pcs(native[:2])
    assert ours["frames"][1]["method"] == "sframe" and ours["frames"][1]["module"] is None
    assert ours["stop_reason"] == "no-unwind-info"

    # realign -> recurse x2 -> main -> __libc_start_call_main, all by SFrame.
    ours = results["from_realign"]["frames"]
    expected = native[names.index("realign"):]
    assert pcs(ours)[:len(expected)] == pcs(expected)
    assert [f["sp"] for f in ours][:len(expected)] == [f["sp"] for f in expected]
    assert all(f["method"] == "sframe" for f in ours[1:])
    assert ours[-1]["function"] == "__libc_start_call_main"

    # unwind tables on realign: the SFrame FDE beside its CFI, and they agree.
    tables = results["tables"]
    assert [s["kind"] for s in tables["sources"]] == ["cfi", "sframe"]
    assert tables["agreement"]["agree"] is True


def test_stripped_demo_under_qemu(tmp_path):
    plain = demo_copy(tmp_path, 'aarch64', stripped=False, objcopy="aarch64-linux-gnu-objcopy")
    stripped = demo_copy(tmp_path, 'aarch64', stripped=True, objcopy="aarch64-linux-gnu-objcopy")
    right, _ = run_under_qemu(plain, native_frames("frames"))
    right = right["frames"]
    results, transcript = run_under_qemu(stripped, [
        ("enabled", "frames", None),
        ("ours", "json", "unwind backtrace -json -sources sframe"),
        *native_frames("alone"),
    ])
    alone, enabled = results["alone"], results["enabled"]
    realign = [f["name"] for f in right].index("realign")
    # GDB alone: right up to realign, then lost.
    assert pcs(alone[:realign + 1]) == pcs(right[:realign + 1])
    assert pcs(alone) != pcs(right)
    assert len(alone) <= realign + 1 or alone[realign + 1]["pc"] != right[realign + 1]["pc"]
    # With the plugin's unwinder: every frame right, down to main.
    assert pcs(enabled) == pcs(right), transcript
    assert len(right) >= realign + 4


# -- pointer authentication, live ------------------------------------------------

def _pac_program(tmp_path):
    """tests/fixtures/pac_aarch64.S assembled with SFrame and linked static (binutils for aarch64)."""
    return aarch64_static(tmp_path, "pac_aarch64.S", "pac", as_flags=("--gsframe",))


def test_signed_return_addresses_are_stripped_live(tmp_path):
    """Both sources strip PAC from real signed return addresses (qemu -cpu max signs them).

    The expected pcs are the ret_in_* labels. GDB 13 alone cannot strip
    here (qemu 7.2's gdbstub does not describe the pauth registers), so its
    own bt breaks at the first signed address; with the plugin's unwinder it
    is right.
    """
    exe, symbols = _pac_program(tmp_path)
    expected = [symbols["stop_here"], symbols["ret_in_middle"], symbols["ret_in_outer"],
                symbols["ret_in_start"]]
    for _ in range(3):
        results, transcript = run_under_qemu(exe, [
            ("enabled", "frames", None),
            ("sframe", "json", "unwind backtrace -json -sources sframe"),
            ("cfi", "json", "unwind backtrace -json -sources cfi"),
            ("explain", "json", "unwind explain -json -sources sframe all"),
            ("tables", "json", "unwind tables -json 0x%x" % (symbols["ret_in_middle"] - 4)),
            *native_frames("alone"),
        ], args=())
        reads = [r for r in results["explain"]["frames"][2]["evidence"]["reads"] if r["what"] == "x30"]
        # qemu draws the keys per run; with 48-bit addresses and top-byte-ignore the signature has
        # 7 bits, so 1 run in 128 signs this address to itself: such a run shows no stripping, run again
        if not reads or reads[0]["value"] != symbols["ret_in_outer"]:
            break
    assert pcs(results["enabled"]) == expected, transcript
    assert pcs(results["sframe"]["frames"]) == expected
    assert pcs(results["cfi"]["frames"]) == expected
    assert results["cfi"]["stop_reason"] == "outermost"           # .cfi_undefined x30 in _start
    # The return address read for outer really was signed, and was stripped.
    outer = results["explain"]["frames"][2]
    assert outer["evidence"]["entry"]["ra_mangled"] is True
    (read,) = [r for r in outer["evidence"]["reads"] if r["what"] == "x30"]
    assert read["value"] != symbols["ret_in_outer"] and read["value"] & (2 ** 48 - 1) == symbols["ret_in_outer"]
    assert any("pointer-auth bits stripped" in n for n in outer["evidence"]["notes"])
    # `unwind tables` in middle (RA saved, signed): both sources mark it signed and agree.
    agreement = results["tables"]["agreement"]
    assert agreement["agree"] is True and agreement["ra"]["cfi"].endswith("(signed)")
    alone = pcs(results["alone"])
    assert alone[:2] == expected[:2]
