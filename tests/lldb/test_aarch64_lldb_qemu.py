"""aarch64 in LLDB: the corpus' static SFrame demo under `qemu-aarch64 -g PORT`, LLDB's `gdb-remote`.

Oracle: LLDB's own register values and physical frames (artificial
tail-call frames left out: recurse(0) tail-calls realign, and LLDB shows
the frame it rebuilt from DW_TAG_call_site at realign's sp).

- The aarch64 register map (lldb_commands/native.py reads each DWARF
  register by the arch's name, then its aliases: LLDB names x29/x30 `fp`/
  `lr` natively and `x29`/`x30` over gdb-remote): the plugin's registers
  of frame 0 are LLDB's x0..x30, sp and pc, every one of them.
- The plugin's `cfi` walk from realign equals LLDB's frames down to
  _start; its `sframe` walk too, as far as it goes (__libc_start_call_main:
  the static glibc start code has no SFrame).
Stopped at realign, before its raise(SIGUSR1): LLDB does not unwind through
qemu's signal trampoline (it shows two frames from the handler).
"""

import json
import shutil

from lldbrun import run_batch
from qemu_user import qemu_user
from support import oracle_dir

NAMES = ["x%d" % n for n in range(31)] + ["sp", "pc"]
LLDB_NAMES = {"fp": "x29", "lr": "x30"}
REGISTERS = ("script import json; fr = lldb.thread.GetFrameAtIndex(0); print('REGISTERS=' + json.dumps("
             "{r.GetName(): r.GetValueAsUnsigned() for s in fr.GetRegisters() for r in s if r.GetName() in %r}))"
             % (NAMES + sorted(LLDB_NAMES),))
FRAMES = ("script import json; print('FRAMES=' + json.dumps([[f.GetPC(), f.GetSP(), f.GetFunctionName()] "
          "for f in lldb.thread.frames if not f.IsArtificial()]))")
WALKS = ["unwind explain --json 0", "unwind backtrace --json --sources cfi",
         "unwind backtrace --json --sources sframe"]


def _printed(transcript, marker):
    return json.loads(transcript.rsplit(marker, 1)[1].splitlines()[0])     # the last: not the echo


def _command_json(transcript, command):
    text = transcript.split("(lldb) " + command + "\n", 1)[1]
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def test_aarch64_register_map_and_walks_equal_lldb(tmp_path):
    demo = tmp_path / "demo"
    shutil.copy(oracle_dir() / "sframe-v3-demo" / "sframe_demo_aarch64", demo)
    demo.chmod(0o755)
    with qemu_user("qemu-aarch64", demo, ["2"], options=("-cpu", "max,sve=off")) as address:
        status, transcript = run_batch(demo, [
            "gdb-remote %s" % address, "breakpoint set -n realign", "continue",
            "script print('TRIPLE=\"%s\"' % lldb.target.GetTriple())", REGISTERS, FRAMES, *WALKS,
        ], timeout=300)
    assert status == 0, transcript
    assert _printed(transcript, "TRIPLE=").startswith("aarch64"), transcript
    theirs = {LLDB_NAMES.get(name, name): value for name, value in _printed(transcript, "REGISTERS=").items()}
    assert sorted(theirs) == sorted(NAMES), sorted(theirs)
    ours = _command_json(transcript, WALKS[0])["frames"][0]["registers"]
    assert {name: ours[name] for name in NAMES} == theirs
    frames = _printed(transcript, "FRAMES=")
    names = [name for _, _, name in frames]
    assert names[0] == "realign" and names.count("recurse") == 2 and names[-1] == "_start", frames
    native = [(pc, sp) for pc, sp, _ in frames]
    cfi = _command_json(transcript, WALKS[1])
    assert [(f["pc"], f["sp"]) for f in cfi["frames"]] == native
    assert cfi["stop_reason"] == "outermost", cfi["stop_detail"]
    # The demo's static glibc start code has no SFrame: that walk ends after main's caller.
    sframe = _command_json(transcript, WALKS[2])["frames"]
    assert [(f["pc"], f["sp"]) for f in sframe] == native[:len(sframe)]
    assert sframe[-1]["function"] == "__libc_start_call_main", sframe
