"""i386 callees that pop their arguments (`ret 4`), on hand-assembled code: how a call moves esp.

The callee's own returns decide: they agree, or they disagree (esp unknown
after the call, never a guess); tail calls add their callee's returns; a
cycle of tail calls ends; a PLT stub leads to the module's own function
through its GOT slot ([ebx + offset], ebx holding the GOT's address).
"""

import struct

from plugin.analysis.calls import UNDECIDED_POPS
from plugin.analysis.state import CFA, Kind, stack

from hand_code import BASE, analysis_over

SP = 4


def x86(*hexes):
    return bytes.fromhex("".join(hexes))


def rel32(source_end, target):
    return struct.pack("<i", target - source_end).hex()


def analysis_of(code, functions, **extra):
    return analysis_over(code, "i386", functions, **extra)


def caller_to(target):
    """f at BASE: push eax; call target; ret (8 bytes with a nop)."""
    return x86("50", "e8", rel32(BASE + 6, target), "c3", "90")


def sp_after_call(analysis):
    return analysis.function(BASE, BASE + 8).states[BASE + 6].reg(SP)


def test_returns_that_agree_pop_their_amount_and_returns_that_disagree_leave_esp_unknown():
    # g: test eax, eax; je +3; ret 4; ret 4        h: test eax, eax; je +3; ret 4; ret
    g, h = BASE + 8, BASE + 24
    body_g, body_h = x86("85c0", "7403", "c20400", "c20400"), x86("85c0", "7403", "c20400", "c3")
    for callee in (g, h):
        code = caller_to(callee) + body_g + x86("90" * (16 - len(body_g))) + body_h
        analysis = analysis_of(code, [(BASE, BASE + 8), (g, g + len(body_g)), (h, h + len(body_h))])
        sp = sp_after_call(analysis)
        if callee == g:
            assert analysis.function(g).pops == {4}
            assert sp == stack(CFA, -4)                      # the pushed eax taken by `ret 4`
        else:
            assert analysis.function(h).pops == {0, 4}
            assert sp[0] == Kind.UNKNOWN, sp
            assert analysis.function(BASE, BASE + 8).notes[BASE + 1] == UNDECIDED_POPS.why


def test_a_tail_call_adds_its_callees_returns():
    # h: jmp g    g: ret 4
    h, g = BASE + 8, BASE + 16
    code = caller_to(h) + x86("e9", rel32(h + 5, g), "909090") + x86("c20400")
    analysis = analysis_of(code, [(BASE, BASE + 8), (h, h + 5), (g, g + 3)])
    assert analysis.function(h, h + 5).tail_calls == {g}
    assert sp_after_call(analysis) == stack(CFA, -4)


def test_a_cycle_of_tail_calls_ends_and_decides():
    # a: test eax, eax; je L; jmp b; L: ret 4        b: jmp a
    a, b = BASE + 8, BASE + 24
    body_a = x86("85c0", "7405", "e9", rel32(a + 9, b), "c20400")
    code = caller_to(a) + body_a + x86("90" * (16 - len(body_a))) + x86("e9", rel32(b + 5, a))
    analysis = analysis_of(code, [(BASE, BASE + 8), (a, a + len(body_a)), (b, b + 5)])
    assert sp_after_call(analysis) == stack(CFA, -4)
    assert analysis.function(b, b + 5).tail_calls == {a} and analysis.function(a).tail_calls == {b}


def test_a_plt_stub_leads_to_the_modules_own_function_through_its_got_slot():
    # stub: jmp [ebx + 0xc]; push 0; jmp PLT0     g: ret 4     the slot GOT + 0xc names g
    stub, g, got = BASE + 16, BASE + 32, 0x5000
    code = caller_to(stub) + x86("90" * 8) + x86("ffa30c000000", "6800000000", "e9", rel32(stub + 16, BASE)) \
        + x86("c20400")
    functions = [(BASE, BASE + 8), (g, g + 3)]
    plt = [(stub, stub + 16)]
    known = analysis_of(code, functions, stubs=plt, got_functions={got + 0xc: g}, got_base=got)
    assert known._stub_slot(stub) == got + 0xc
    assert sp_after_call(known) == stack(CFA, -4)
    # another module's function (no definition here), and the caller's `ret` reached 4 bytes off its
    # return address if it popped nothing (libm's nanf128 calling libc's __strtof128_nan, which returns
    # a _Float128 in memory and pops its hidden pointer): what it pops is not known
    other = analysis_of(code, functions, stubs=plt, got_names={got + 0xc: "g"}, got_base=got)
    assert other._stub_name(stub) == "g"
    assert sp_after_call(other)[0] == Kind.UNKNOWN
    assert "another module's function" in other.function(BASE, BASE + 8).notes[BASE + 1]
    # the same call where the caller's own code pops the argument: taken to pop nothing, decided
    popping = x86("50", "e8", rel32(BASE + 6, stub), "83c404", "c3") + x86("90" * 6) + code[16:]
    tidy = analysis_of(popping, [(BASE, BASE + 10), (g, g + 3)], stubs=plt, got_names={got + 0xc: "g"}, got_base=got)
    assert tidy.function(BASE, BASE + 10).states[BASE + 6].reg(SP) == stack(CFA, -8)
