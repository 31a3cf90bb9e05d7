"""Instructions that write two general registers: both are overwritten.

`mulx hi, lo, src` (BMI2) writes its first two operands. OpenSSL's
hand-written bignum code (libcrypto's mulx4x/sqrx8x helpers) does `mulx r8,
rbx, [rsi]` and later stores rbx: when only the first destination was taken
as written, rbx still held "the caller's value", its store looked like a
save and every later write of rbx a lost callee-saved register (2,267 false
wrong rows in Debian's libcrypto.so.3). The oracle for what each
instruction writes is capstone's own operand access (regs_access).
"""

import capstone

from plugin.analysis.state import Kind, caller

from hand_code import BASE, analysis_over

RBX = 3
# mulx r8, rbx, qword ptr [rsi]; mov qword ptr [rsp + 8], rbx; mov rbx, r8; ret
CODE = bytes.fromhex("c462e3f606" "48895c2408" "4c89c3" "c3")


def _written_by_capstone(code, address):
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    cs.detail = True
    insn = next(cs.disasm(code[address - BASE:], address, 1))
    return {insn.reg_name(r) for r in insn.regs_access()[1]}


def test_mulx_writes_both_destinations():
    assert {"rbx", "r8"} <= _written_by_capstone(CODE, BASE)
    analysis = analysis_over(CODE, "x86_64", [(BASE, BASE + len(CODE))])
    result = analysis.function(BASE, BASE + len(CODE))
    after_mulx = result.states[BASE + 5]
    assert after_mulx.reg(RBX)[0] == Kind.OTHER            # the product's low half, not the caller's rbx
    assert after_mulx.reg(8)[0] == Kind.OTHER
    # the store is not a save of the caller's rbx: no slot holds it
    at_ret = result.states[BASE + 13]
    assert caller(RBX) not in at_ret.mem.values()


def test_i386_mulx_writes_both_destinations():
    code = bytes.fromhex("c4e27bf61e" "c3")          # mulx ebx, eax, dword ptr [esi]; ret
    assert {"ebx", "eax"} <= _written_by_capstone_32(code)
    analysis = analysis_over(code, "i386", [(BASE, BASE + len(code))])
    result = analysis.function(BASE, BASE + len(code))
    after = result.states[BASE + 5]
    assert after.reg(3)[0] == Kind.OTHER and after.reg(0)[0] == Kind.OTHER


def _written_by_capstone_32(code):
    cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_32)
    cs.detail = True
    insn = next(cs.disasm(code, BASE, 1))
    return {insn.reg_name(r) for r in insn.regs_access()[1]}
