"""Which functions never return, decided once per module from the control flow (plugin.analysis.noreturn).

Each function is a few instructions built by hand (address -> Insn); the
expected answers follow from the paths drawn in each test's comment.
"""

from plugin.analysis import noreturn
from plugin.analysis.ops import Flow, Insn


def insn(address, flow=Flow.NEXT, target=None, size=1):
    found = Insn(address, size, "")
    found.flow, found.target = flow, target
    return found


def module(code, functions, parts=(), names=None):
    table = {i.address: i for i in code}
    names = names or {}
    return noreturn.Module(functions, set(parts), table.get, names.get, lambda slot: None)


def test_a_function_that_returns_only_through_its_cold_part_returns():
    # 0x10: push; jmp 0x90 (its part)      0x90: pop; ret      0x20: call 0x10; ret
    code = [insn(0x10), insn(0x11, Flow.JUMP, 0x90), insn(0x90), insn(0x91, Flow.RET),
            insn(0x20, Flow.CALL, 0x10), insn(0x21, Flow.RET)]
    found = noreturn.decide(module(code, {0x10: 0x12, 0x20: 0x22, 0x90: 0x92}, parts=[0x90]))
    assert found == {0x10: False, 0x20: False}


def test_a_call_of_a_named_noreturn_function_ends_the_path():
    # 0x10: call abort (0x80, named); 0x11 falls into the next function
    code = [insn(0x10, Flow.CALL, 0x80), insn(0x11), insn(0x12, Flow.RET)]
    found = noreturn.decide(module(code, {0x10: 0x12, 0x12: 0x13}, names={0x80: True}))
    assert found == {0x10: True, 0x12: False}


def test_mutual_recursion_without_a_return_never_returns_and_with_one_returns():
    # 0x10: call 0x20; jmp 0x10     0x20: call 0x10; hlt          (neither can return)
    # 0x30: call 0x40; ret          0x40: je 0x42; call 0x30; 0x42: ret
    code = [insn(0x10, Flow.CALL, 0x20), insn(0x11, Flow.JUMP, 0x10),
            insn(0x20, Flow.CALL, 0x10), insn(0x21, Flow.STOP),
            insn(0x30, Flow.CALL, 0x40), insn(0x31, Flow.RET),
            insn(0x40, Flow.BRANCH, 0x42), insn(0x41, Flow.CALL, 0x30), insn(0x42, Flow.RET)]
    functions = {0x10: 0x12, 0x20: 0x22, 0x30: 0x32, 0x40: 0x43}
    assert noreturn.decide(module(code, functions)) == {0x10: True, 0x20: True, 0x30: False, 0x40: False}


def test_a_tail_call_returns_as_its_target_does():
    # 0x10: jmp 0x20 (tail call)   0x20: hlt       0x30: jmp 0x40 (tail call)   0x40: ret
    code = [insn(0x10, Flow.JUMP, 0x20), insn(0x20, Flow.STOP), insn(0x30, Flow.JUMP, 0x40),
            insn(0x40, Flow.RET)]
    functions = {0x10: 0x11, 0x20: 0x21, 0x30: 0x31, 0x40: 0x41}
    assert noreturn.decide(module(code, functions)) == {0x10: True, 0x20: True, 0x30: False, 0x40: False}


def test_an_indirect_jump_is_assumed_to_return():
    code = [insn(0x10, Flow.INDIRECT)]
    assert noreturn.decide(module(code, {0x10: 0x11})) == {0x10: False}


def test_a_named_function_off_the_list_is_decided_by_its_code():
    # x86_64: f at BASE: call g; push rbx; ret      g (named "Die", not a name the list knows): jmp g
    # (armhf libasan's __sanitizer::Die: a literal pool after its callers' calls was read as code)
    import struct
    from hand_code import BASE, analysis_over
    g = BASE + 16
    code = bytes.fromhex("e8") + struct.pack("<i", g - (BASE + 5)) + bytes.fromhex("53c3") + bytes(9) \
        + bytes.fromhex("ebfe")
    names = {g: "Die", BASE: "f"}
    for name, never in (("Die", True), ("exit", True), ("helper_that_loops", True)):
        analysis = analysis_over(code, "x86_64", [(BASE, BASE + 7), (g, g + 2)],
                                 symbol=lambda a, name=name: {**names, g: name}.get(a))
        analysis.decide_noreturn()
        f = analysis.function(BASE, BASE + 7)
        assert (BASE + 5 not in f.states) is never, (name, sorted(f.states))
    # a function of the same name whose code returns (g: ret) still returns
    returning = code[:16] + bytes.fromhex("c3")
    analysis = analysis_over(returning, "x86_64", [(BASE, BASE + 7), (g, g + 1)], symbol=names.get)
    analysis.decide_noreturn()
    assert BASE + 5 in analysis.function(BASE, BASE + 7).states
