"""The instruction analysis on hand-assembled code: stack height, frame pointer, saves, merges."""

import struct

from plugin.analysis import CodeAnalysis, is_noreturn_name
from plugin.analysis import rows
from plugin.analysis.state import CFA, Kind, caller, stack
from plugin.arch import BY_NAME

from hand_code import BASE, analysis_over



def analyse(code, arch="x86_64", functions=None):
    functions = functions or [(BASE, BASE + len(code))]
    analysis = analysis_over(code, arch, functions)
    return analysis, analysis.function(functions[0][0], functions[0][1])


def x86(*hexes):
    return bytes.fromhex("".join(hexes))


def a64(*words):
    return b"".join(struct.pack("<I", w) for w in words)


def cfa(result, analysis, address):
    return rows.cfa_of(result.states[address], analysis.facts)


def test_frame_pointer_prologue_and_leave():
    code = x86("55", "4889e5", "53", "4883ec18", "31db90", "e800000000", "488b5df8", "c9", "c3")
    analysis, result = analyse(code)
    addresses = sorted(result.insns)
    sp, rbp = 7, 6
    assert [cfa(result, analysis, a) for a in addresses] == [
        (sp, 8, False), (sp, 16, False), (sp, 16, False), (sp, 24, False), (sp, 48, False),
        (sp, 48, False), (sp, 48, False), (sp, 48, False), (sp, 48, False), (sp, 8, False)]
    body = result.states[addresses[5]]
    assert body.reg(rbp) == stack(CFA, -16)
    assert body.mem[(CFA, -16)] == caller(6) and body.mem[(CFA, -24)] == caller(3)
    assert body.reg(3)[0] == Kind.OTHER                      # rbx overwritten by xor ebx, ebx
    assert result.states[addresses[-1]].reg(3) == caller(3)  # restored by the load from its slot
    assert result.returns


def test_alloca_keeps_the_cfa_through_the_frame_pointer():
    code = x86("55", "4889e5", "4829c4", "c9", "c3")          # sub rsp, rax
    analysis, result = analyse(code)
    after = result.states[BASE + 7]
    assert after.reg(7)[0] == Kind.UNKNOWN and "unknown amount" in after.reg(7)[1]
    assert cfa(result, analysis, BASE + 7) == (6, 16, False)
    assert cfa(result, analysis, BASE + 8) == (7, 8, False)  # leave restores a known sp


def test_paths_that_disagree_give_unknown():
    # test rdi,rdi; je +1; push rbx; ret  -> at ret sp is CFA-8 or CFA-16
    code = x86("4885ff", "7401", "53", "c3")
    analysis, result = analyse(code)
    at_ret = result.states[BASE + 6]
    assert at_ret.reg(7)[0] == Kind.UNKNOWN and "paths disagree" in at_ret.reg(7)[1]
    assert rows.cfa_of(at_ret, analysis.facts) is None


def test_drap_realignment_is_followed_through_the_saved_cfa():
    code = x86("4c8d542408", "4883e4e0", "41ff72f8", "55", "4889e5", "4152", "4883ec40", "c3")
    analysis, result = analyse(code)
    inside = result.states[BASE + 0x13]                      # after push r10
    assert inside.reg(7)[1] != CFA                           # sp is relative to the realignment
    assert rows.cfa_of(inside, analysis.facts) == (10, 0, False)
    state = inside.copy()
    state.regs.pop(10)                                       # without r10 and sp: through [rbp-8]
    state.regs.pop(7)
    assert rows.cfa_of(state, analysis.facts) == (6, -8, True)


def test_calls_to_functions_that_never_return_end_the_path():
    # f: call g; push rbx (never reached); ret.   g: ud2
    code = x86("e804000000", "53", "c3", "90", "90", "0f0b")
    functions = [(BASE, BASE + 7), (BASE + 9, BASE + 11)]
    analysis, result = analyse(code, functions=functions)
    assert BASE + 5 not in result.states and not result.returns
    assert is_noreturn_name("abort") and is_noreturn_name("_ZSt20__throw_length_errorPKc")
    assert not is_noreturn_name("malloc")


def test_pic_jump_table_targets_are_followed():
    # cmp rdi,1; ja out; lea rdx,[rip+table]; movsxd rax,[rdx+rdi*4]; add rax,rdx; jmp rax
    # case0: push rbx; pop rbx; ret   case1: ret   out: ret   table: two int32 offsets
    head = x86("4883ff01", "7714", "488d1516000000", "48630cba", "4801d1", "ffe1")
    cases = x86("53", "5b", "c3", "c3", "c3")
    code = head + cases
    table_at = len(code) + 1                                 # one byte of padding before the table
    code += b"\x90"
    table = BASE + table_at
    code += struct.pack("<ii", BASE + len(head) - table, BASE + len(head) + 3 - table)
    lea_end = BASE + 6 + 7
    code = code[:9] + struct.pack("<i", table - lea_end) + code[13:]
    analysis, result = analyse(code, functions=[(BASE, BASE + len(head) + len(cases))])
    assert BASE + len(head) in result.states and BASE + len(head) + 3 in result.states
    assert not result.unresolved
    assert cfa(result, analysis, BASE + len(head) + 1) == (7, 16, False)


def test_aarch64_frame_record_and_writeback():
    code = a64(0xA9BE7BFD,        # stp x29, x30, [sp, #-0x20]!
               0x910003FD,        # mov x29, sp
               0xF9000BF3,        # str x19, [sp, #0x10]
               0x94000000,        # bl .
               0xF9400BF3,        # ldr x19, [sp, #0x10]
               0xA8C27BFD,        # ldp x29, x30, [sp], #0x20
               0xD65F03C0)        # ret
    analysis, result = analyse(code, "aarch64")
    assert cfa(result, analysis, BASE) == (31, 0, False)
    assert cfa(result, analysis, BASE + 4) == (31, 32, False)
    body = result.states[BASE + 16]
    assert rows.cfa_of(body, analysis.facts) == (31, 32, False)
    assert body.reg(29) == stack(CFA, -32)
    assert body.mem[(CFA, -32)] == caller(29) and body.mem[(CFA, -24)] == caller(30)
    assert body.mem[(CFA, -16)] == caller(19)
    assert body.reg(30)[0] == Kind.OTHER                     # bl wrote the link register
    at_ret = result.states[BASE + 24]
    assert rows.cfa_of(at_ret, analysis.facts) == (31, 0, False)
    assert at_ret.reg(30) == caller(30) and at_ret.reg(19) == caller(19)


def test_symbolic_plt_expression_uses_the_pc():
    analysis, result = analyse(x86("c3"))
    state = result.states[BASE]
    # DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
    expression = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    assert rows.symbolic(expression, state, pc=0x1030, pc_register=16) == stack(CFA, 0)
    assert rows.symbolic(expression, state, pc=0x103b, pc_register=16) == stack(CFA, 8)
    assert rows.symbolic(expression, state) is None          # rip unknown without the pc


def test_i386_pc_thunk_call_next_and_callee_pops():
    # f: push ebx; call thunk; add ebx, 0x1000; call .+5; pop ecx; push eax; call g; pop ebx; ret
    # thunk: mov ebx, [esp]; ret     g: ret 4
    f = x86("53", "e815000000", "81c300100000", "e800000000", "59", "50", "e807000000", "5b", "c3")
    code = f + x86("90", "8b1c24", "c3", "c20400")
    thunk, g = BASE + 27, BASE + 31
    functions = [(BASE, BASE + len(f)), (thunk, g), (g, g + 3)]
    analysis, result = analyse(code, "i386", functions)
    sp, ebx = 4, 3
    assert len(f) == 26 and [i.target for a, i in sorted(result.insns.items()) if i.target] == [thunk, g]
    after_thunk = result.states[BASE + 6]
    assert after_thunk.reg(ebx) == (Kind.ADDR, BASE + 6)          # the thunk's return address ...
    assert after_thunk.reg(sp) == stack(CFA, -8) and after_thunk.reg(0)[1] == "not tracked"   # not clobbered
    assert result.states[BASE + 17].reg(sp) == stack(CFA, -12)    # call .+5 pushed its address
    assert result.states[BASE + 17].mem[(CFA, -12)] == (Kind.ADDR, BASE + 17)
    assert result.states[BASE + 18].reg(sp) == stack(CFA, -8)     # ... and pop ecx took it
    assert result.states[BASE + 24].reg(sp) == stack(CFA, -8)     # g's `ret 4` popped the pushed eax
    assert analysis.function(g, g + 3).pops == {4}
    assert cfa(result, analysis, BASE + 25) == (sp, 4, False) and result.states[BASE + 25].reg(ebx) == caller(3)


def test_arm_mnemonics_split_into_base_condition_and_flags():
    from plugin.analysis.arm import split_mnemonic
    assert split_mnemonic("bls") == ("b", "ls", False) and split_mnemonic("ble") == ("b", "le", False)
    assert split_mnemonic("blx") == ("blx", None, False) and split_mnemonic("bleq") == ("bl", "eq", False)
    assert split_mnemonic("popne") == ("pop", "ne", False) and split_mnemonic("pop.w") == ("pop", None, False)
    assert split_mnemonic("adds") == ("add", None, True) and split_mnemonic("addseq") == ("add", "eq", True)
    assert split_mnemonic("ldmfdne") == ("ldmfd", "ne", False) and split_mnemonic("rsbpl") == ("rsb", "pl", False)
    assert split_mnemonic("ite") == ("ite", None, False) and split_mnemonic("bics") == ("bic", None, True)
    assert split_mnemonic("teq") == ("teq", None, False) and split_mnemonic("lslscs") == ("lsl", "cs", True)


def test_thumb_conditional_return_keeps_the_other_path():
    # push {r4, lr}; cmp r0, #0; it ne; popne {r4, pc}; movs r0, #1; pop {r4, pc}
    code = bytes.fromhex("10b5" "0028" "18bf" "10bd" "0120" "10bd")
    functions = [(BASE, BASE + len(code))]
    padded = code + bytes(64)
    analysis = CodeAnalysis(BY_NAME["arm"], lambda a, n: padded[a - BASE:a - BASE + n], functions, thumb=True)
    result = analysis.function(BASE, BASE + len(code))
    assert [result.insns[a].text for a in sorted(result.insns)] == [
        "push {r4, lr}", "cmp r0, #0", "it ne", "popne {r4, pc}", "movs r0, #1", "pop {r4, pc}"]
    assert result.returns and rows.cfa_of(result.states[BASE + 8], analysis.facts) == (13, 8, False)
    assert result.states[BASE + 8].mem[(CFA, -4)] == caller(14)


def test_i386_callee_pops_read_from_its_code_without_a_function_table():
    # f: push eax; call g; ret     g (no table entry, as in a live process): nop; ret 4
    code = x86("50", "e802000000", "c3", "90", "90", "c20400")
    padded = code + bytes(64)
    analysis = CodeAnalysis(BY_NAME["i386"], lambda a, n: padded[a - BASE:a - BASE + n])
    result = analysis.function(BASE, BASE + 7)
    assert result.insns[BASE + 1].target == BASE + 8
    assert result.states[BASE + 6].reg(4) == stack(CFA, -4)      # g's `ret 4` took the pushed eax
    assert cfa(result, analysis, BASE + 6) == (4, 4, False)


def test_pushf_and_popf_move_the_stack_pointer_by_a_word():
    """GCC's cpuid.h (crtfastmath.o, i386) toggles EFLAGS.ID with pushf/popf in inline asm: each moves
    esp by 4 (x86_64: rsp by 8). Before, they were taken to leave the stack pointer alone."""
    # i386: pushfd; pushfd; pop eax; push eax; popfd; popfd; ret
    analysis, result = analyse(x86("9c", "9c", "58", "50", "9d", "9d", "c3"), arch="i386")
    assert [cfa(result, analysis, BASE + i)[1] for i in range(7)] == [4, 8, 12, 8, 12, 8, 4]
    # x86_64: pushfq; popfq; ret
    analysis, result = analyse(x86("9c", "9d", "c3"))
    assert [cfa(result, analysis, BASE + i) for i in range(3)] == [(7, 8, False), (7, 16, False), (7, 8, False)]
