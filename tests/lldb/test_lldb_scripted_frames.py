"""What LLDB 22 does with a frame a provider supplies (tests/lldb/scripted_frame_probe.py hands
back LLDB's own frame #2), so the day LLDB changes, these fail and `unwind provider` can do more.

Why a frame `unwind provider` supplies shows no registers and no variables in LLDB 22.1.8:

- A dict ({"idx", "pc"}: what lldb_commands/provider.py returns) becomes a plain StackFrame made
  without a valid CFA (ScriptedFrameProvider.cpp, create_frame_from_dict: `cfa_is_valid = false`;
  the dict has no key for one; SBFrame.GetCFA() answers a small number). Its registers are what LLDB's own unwinder has at the same index
  (StackFrame::GetRegisterContext asks Thread::CreateRegisterContextForFrame): none past LLDB's
  last frame, and a local at a frame-base offset reads "No frame base available for this
  historical stack frame." (StackFrame::GetFrameBaseValue without a valid CFA).
- A ScriptedFrame with a register context kills LLDB when its registers are read:
  ScriptedFrame::CreateRegisterContext (Plugins/Process/scripted/ScriptedFrame.cpp) builds the
  DynamicRegisterInfo in a local shared_ptr (`register_info_sp`) and gives the
  RegisterContextMemory a reference to it (`*register_info_sp`; RegisterContextMemory keeps
  `DynamicRegisterInfo &m_reg_infos`), which dangles once the function returns. The object is
  LLDB's own (built from a copy of get_register_info()), so nothing a provider keeps alive in
  Python helps.
"""

import re
import signal

from lldbrun import batch_outputs, run_batch, run_lldb, version
from support import ROOT, build

PROVIDER_VERSION = 22
PROBE = ROOT / "tests" / "lldb" / "scripted_frame_probe.py"
REGISTER = "script lldb.target.RegisterScriptedFrameProvider('scripted_frame_probe.Probe', " \
           "lldb.SBStructuredData(), lldb.SBError())"


def _no_provider_api():
    results, _ = run_lldb(build("chain.c", ["-O0"]), [
        ("api", "py", "hasattr(lldb.SBTarget, 'RegisterScriptedFrameProvider')")], args=["plain"])
    assert results["api"] is False, results


def test_a_dict_frame_has_no_frame_base():
    if version() < PROVIDER_VERSION:
        return _no_provider_api()
    results, _ = run_lldb(build("chain.c", ["-O0"]), [
        ("alone", "frames", None),
        ("import", "cmd", "command script import %s" % PROBE),
        ("register", "cmd", REGISTER),
        ("with", "frames", None),
        ("select", "cmd", "frame select 2"),
        ("variables", "cmd", "frame variable"),
        ("select3", "cmd", "frame select 3"),
        ("variables3", "cmd", "frame variable"),
    ], args=["recurse", "3"], setup=["unwind provider off"])     # the probe alone (see test_two_providers_...)
    alone, given = results["alone"], results["with"]
    assert [f["pc"] for f in given] == [f["pc"] for f in alone], (given, alone)
    assert given[2]["cfa"] < 0x10000 < alone[2]["cfa"], (given[2], alone[2])     # no CFA
    assert given[3] == alone[3]
    # Frame #2 is recurse(n=1): its n is at a frame-base offset, and the frame has no frame base.
    assert results["variables"]["output"].strip() == \
        "(int) n = <No frame base available for this historical stack frame.>", results["variables"]
    assert results["variables3"]["output"].strip() == "(int) n = 2", results["variables3"]


def test_reading_a_scripted_frames_registers_kills_lldb_22_1(monkeypatch, tmp_path):
    if version() < PROVIDER_VERSION:
        return _no_provider_api()
    monkeypatch.setenv("PROBE_FORM", "scripted")
    monkeypatch.setenv("TMPDIR", str(tmp_path))     # where LLDB writes its crash diagnostics
    status, transcript = run_batch(build("chain.c", ["-O0"]), [
        "command script import %s" % PROBE,
        "breakpoint set -n stop_here",
        "process launch -- recurse 3",
        "frame select 2",
        "register read rip rsp",        # before the provider: LLDB's own frame #2
        REGISTER,
        "bt 4",
        "frame select 2",
        "register read rip rsp",
    ], import_plugin=False)
    outputs = batch_outputs(transcript)
    own = next(out for cmd, out in outputs if cmd == "register read rip rsp")
    rip = re.search(r"rip = (0x[0-9a-f]+)", own).group(1)
    bt = next(out for cmd, out in outputs if cmd == "bt 4")
    assert re.search(r"frame #2: %s .*\[synthetic\]" % rip, bt), bt       # the ScriptedFrame is frame #2
    # LLDB 22.1.8 dies reading the registers it was given (the dangling register info);
    # once LLDB is fixed it prints them and this fails: supply ScriptedFrames with registers then.
    reads = [out for cmd, out in outputs if cmd == "register read rip rsp"]
    assert status == -signal.SIGSEGV or (len(reads) == 2 and reads[1] != own), (status, transcript[-3000:])


def test_two_providers_on_one_target_abort_lldb_22_1():
    """A limit of the provider being on as loaded: a second frame provider on the same target
    (here the probe, registered after the plugin's) aborts LLDB 22.1.8 at `bt` ("Resource
    deadlock avoided": each provider reads its input frames, which the other one gives, under
    the lock LLDB holds while it asks). docs/commands.md says to run `unwind provider off`
    first. Once LLDB chains providers, `bt` works and this fails."""
    if version() < PROVIDER_VERSION:
        return _no_provider_api()
    status, transcript = run_batch(build("chain.c", ["-O0"]), [
        "command script import %s" % PROBE,
        "breakpoint set -n stop_here",
        "process launch -- plain",
        "unwind provider",
        REGISTER,
        "bt",
    ])
    assert "provider: on" in transcript, transcript[-3000:]
    assert status == 128 + signal.SIGABRT or status == -signal.SIGABRT, (status, transcript[-3000:])
    assert "Resource deadlock avoided" in transcript, transcript[-3000:]


def test_a_provider_registered_first_keeps_the_target():
    """The other order: a frame provider registered before the plugin is imported keeps the
    target to itself. The plugin does not register its own there (LLDB 22.1.8 aborts a `bt`
    with two), `bt` works, and `unwind provider on` says why it refuses."""
    if version() < PROVIDER_VERSION:
        return _no_provider_api()
    status, transcript = run_batch(build("chain.c", ["-O0"]), [
        "command script import %s" % PROBE,
        REGISTER,
        "command script import %s" % (ROOT / "lldb_commands"),
        "breakpoint set -n stop_here",
        "process launch -- plain",
        "bt 3",
        "target frame-provider list",
        "unwind provider on",
    ], import_plugin=False)
    assert status == 1, (status, transcript[-3000:])        # the refused `unwind provider on`; no abort
    assert "Resource deadlock avoided" not in transcript, transcript[-3000:]
    outputs = dict(batch_outputs(transcript))
    assert "stop_here" in outputs["bt 3"], transcript[-3000:]
    assert "another frame provider is registered on this target (scripted_frame_probe.Probe)" \
        in outputs["unwind provider on"], transcript[-3000:]
    assert "UnwindFrameProvider" not in outputs["target frame-provider list"], transcript[-3000:]
