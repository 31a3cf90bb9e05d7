"""A frame provider for tests/lldb/test_lldb_scripted_frames.py (LLDB 22): it hands LLDB frame #2
of the thread again, in one of the forms a provider may return, to record what LLDB does with it.

PROBE_FORM in the environment: "dict" ({"idx", "pc"}: LLDB makes a plain StackFrame), or
"scripted" (a ScriptedFrame whose register context is LLDB's own registers of that frame,
laid out as the template's INTEL64_GPR says). Every other frame is LLDB's own (its index).
"""
from __future__ import annotations

import os

import lldb
from lldb.plugins.scripted_frame_provider import ScriptedFrameProvider
from lldb.plugins.scripted_process import INTEL64_GPR, ScriptedFrame

PROBED = 2


def gpr_bytes(frame) -> bytes:
    """frame's general registers in INTEL64_GPR's layout (0 for one LLDB does not have)."""
    data = bytearray(max(r["offset"] + r["bitsize"] // 8 for r in INTEL64_GPR))
    for register in INTEL64_GPR:
        value = frame.FindRegister(register["name"])
        size = register["bitsize"] // 8
        data[register["offset"]:register["offset"] + size] = \
            (value.GetValueAsUnsigned() if value.IsValid() else 0).to_bytes(size, "little")
    return bytes(data)


class GivenFrame(ScriptedFrame):
    def __init__(self, thread, index, pc, registers):
        super().__init__(thread, lldb.SBStructuredData())
        self.index, self.pc, self.registers = index, pc, registers

    def get_id(self):
        return self.index

    def get_pc(self):
        return self.pc

    def is_artificial(self):
        return False

    def get_register_context(self):
        return self.registers


class Probe(ScriptedFrameProvider):
    @staticmethod
    def get_description():
        return "unwind tests: LLDB's frame #2 handed back as a dict or a ScriptedFrame"

    def get_frame_at_index(self, index):
        if index >= self.input_frames.GetSize():
            return None
        if index != PROBED:
            return index
        frame = self.input_frames.GetFrameAtIndex(index)
        if os.environ.get("PROBE_FORM") == "scripted":
            return GivenFrame(self.thread, index, frame.GetPC(), gpr_bytes(frame))
        return {"idx": index, "pc": frame.GetPC()}
