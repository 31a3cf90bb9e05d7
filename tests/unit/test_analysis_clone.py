"""A clone system call: on the child's path the stack pointer is the new thread's, so after it the
analysis knows no stack pointer (libasan's internal_clone on armhf: the child's `ldr ip, [sp], #8`
taken for a pop of the parent's frame gave 3 false "wrong" rows). Other system calls keep it."""
from plugin.analysis import arm
from plugin.analysis.state import CFA, Kind, stack

from hand_code import BASE, analysis_over


def _sp_at_ret(code, arch):
    analysis = analysis_over(code, arch, [(BASE, BASE + len(code))])
    function = analysis.function(BASE, BASE + len(code))
    return function.states[BASE + len(code) - 1].reg(4 if arch == "i386" else 7)


def test_after_a_clone_the_stack_pointer_is_not_known_and_after_getpid_it_is():
    for number, cloned in ((56, True), (435, True), (39, False)):
        code = bytes.fromhex("b8") + number.to_bytes(4, "little") + bytes.fromhex("0f05c3")  # mov eax, N; syscall; ret
        sp = _sp_at_ret(code, "x86_64")
        assert (sp[0] == Kind.UNKNOWN) is cloned, (number, sp)
        if not cloned:
            assert sp == stack(CFA, -8)
    for number, cloned in ((120, True), (20, False)):       # i386: mov eax, N; int 0x80; ret
        sp = _sp_at_ret(bytes.fromhex("b8") + number.to_bytes(4, "little") + bytes.fromhex("cd80c3"), "i386")
        assert (sp[0] == Kind.UNKNOWN) is cloned, (number, sp)
        assert "clone" in str(sp) if cloned else sp == stack(CFA, -4)


def test_arm_svc_is_decoded_as_a_system_call_with_r7_its_number():
    # `svc` was split as `s` + the condition `vc`, and had no effect at all
    assert arm.split_mnemonic("svc") == ("svc", None, False)
    clone = arm.decode_thumb(BASE, 2, "movs", "r7, #0x78")
    assert clone.effects == [("set", 7, ("addr", 120))]
    call = arm.decode_thumb(BASE + 2, 2, "svc", "#0")
    assert call.effects[0][:2] == ("set", arm.SP) and call.effects[0][2][:2] == ("syscall_sp", 7)
    assert ("set", 0, ("other",)) in call.effects
