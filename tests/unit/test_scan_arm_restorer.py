"""The stack scan on 32-bit Arm takes a word holding a Thumb signal restorer's address (bit 0 set,
as lr held it when the kernel entered the handler) as a signal frame's return address: no call
precedes a restorer, its code (`mov.w r7, #119; svc 0`, glibc's __default_sa_restorer) says what it is."""

from plugin import arch as arches
from plugin.model.evidence import Frame
from plugin.model.outcome import AttemptStatus
from plugin.strategies import scan
from fallback_world import STACK_TOP, World

ARM = arches.BY_NAME["arm"]
RESTORER = bytes((0x4f, 0xf0, 119, 0x07, 0x00, 0xdf))       # Thumb-2 mov.w r7, #119; svc 0 (sigreturn)


def test_a_thumb_restorer_address_is_a_signal_frames_return():
    import capstone
    cs = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB)
    assert [("%s %s" % (m, o)) for _, _, m, o in cs.disasm_lite(RESTORER, 0)] == ["mov.w r7, #0x77", "svc #0"]
    w = World(ARM)
    handler = w.function("handler", 0x300, 0x100, frame_pointer=False)
    restorer = w.function("__default_sa_restorer", 0x600, 0x10, frame_pointer=False)
    w.put_code(restorer, RESTORER)
    sp = STACK_TOP - 0x400
    w.word(sp + 8, restorer | 1)
    regs = w.registers(pc=handler + 0x20, sp=sp)
    frame = Frame(level=0, pc=handler + 0x20, registers=regs, method="context", exact_pc=True)
    outcome = scan.step(frame, w.context(("scan",)))
    assert outcome.status == AttemptStatus.RECOVERED, outcome.reason
    assert outcome.evidence.entry["slot"] == sp + 8
    assert outcome.registers[ARM.pc] == restorer
    assert "signal trampoline" in outcome.evidence.entry["call"]
