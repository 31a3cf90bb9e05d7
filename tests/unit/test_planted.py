"""Return addresses runtimes plant (plugin/strategies/planted.py): decided from the address
itself, never held against the debugger by `unwind compare`, and Go's stack switches.

The code bytes are Go's own: runtime.goexit starts with a nop before its call
(amd64 `90 e8 ...`, arm64 `mov x0, x0; bl`), systemstack calls its function
with `call *%rdi` (ff d7) after switching to g0.
"""

from types import SimpleNamespace

from plugin import arch as arches
from plugin.cache import BoundedCache
from plugin.target import Target
from plugin.model.evidence import Frame
from plugin.strategies import planted
from plugin.validate.compare import _judge

X86 = arches.by_name("x86_64")
ARM64 = arches.by_name("aarch64")
GOEXIT = 0x4000
SYSTEMSTACK = 0x5000
CALLER = 0x6005             # after `call rel32` at 0x6000
NOT_AFTER_CALL = 0x7010

CODE = {GOEXIT - 0x10: b"\xcc" * 0x10 + b"\x90\xe8\x00\x00\x00\x00\x90",     # int3 padding, then goexit
        SYSTEMSTACK: b"\x90" * 8 + b"\xff\xd7" + b"\xe8\x00\x00\x00\x00" + b"\x90" * 8,
        0x5ff0: b"\x90" * 0x10 + b"\xe8\x00\x00\x00\x00", 0x7000: b"\x90" * 0x20}
SYMBOLS = {GOEXIT: "runtime.goexit.abi0", SYSTEMSTACK: "runtime.systemstack.abi0"}


def context(arch=X86, code=CODE, symbols=SYMBOLS):
    def read_memory(address, size):
        for start, data in code.items():
            if start <= address and address + size <= start + len(data):
                return data[address - start:address - start + size]
        raise OSError("unreadable")

    def symbol(address):
        for start, name in symbols.items():
            if start <= address < start + 0x40:
                return name, start
        return None
    return SimpleNamespace(arch=arch, read_memory=read_memory, is_code=lambda pc: True, symbol=symbol,
                           lookup_pc=lambda frame: frame.pc if frame.exact_pc else frame.pc - 1,
                           target=Target(), signal_trampolines=BoundedCache("signal trampolines", 64))


def _frame(pc, exact=False):
    return Frame(level=3, pc=pc, registers={}, method="frame-pointer", exact_pc=exact)


def test_goexit_plus_one_instruction_is_the_goroutines_outermost_frame():
    why = planted.outermost(_frame(GOEXIT + 1), context())
    assert why and "runtime.goexit+1" in why and "outermost frame" in why
    # Not the planted address: goexit's own call site, its start, another function.
    for pc in (GOEXIT + 6, GOEXIT, CALLER):
        assert planted.outermost(_frame(pc), context()) is None, hex(pc)
    # arm64: one instruction is 4 bytes.
    arm = context(ARM64, {GOEXIT: bytes.fromhex("e00300aa27060094")})
    assert planted.planted_at(arm, GOEXIT + 4).function == "runtime.goexit"
    assert planted.planted_at(arm, GOEXIT + 1) is None


def test_planted_address_is_never_evidence_against_either_side():
    verdict = _judge(CALLER, GOEXIT + 1, 5, context())
    assert "looks right" not in verdict, verdict
    verdict = _judge(GOEXIT + 1, NOT_AFTER_CALL, 5, context())
    assert verdict.startswith("plugin looks right: 0x4001 is runtime.goexit+1"), verdict
    # Without symbols nothing is known to be planted: the old verdict stands.
    bare = context(symbols={})
    assert _judge(CALLER, GOEXIT + 1, 5, bare).startswith("plugin looks right")


def test_systemstack_switch_ends_the_walk_only_at_its_call_on_g0():
    after_switch = SYSTEMSTACK + 10             # after `call *%rdi`
    why = planted.stack_switch(_frame(after_switch), context())
    assert why and "runtime.systemstack" in why and "g0 stack" in why
    # Its direct call (gosave_systemstack_switch, still on the goroutine's stack) is no switch,
    assert planted.stack_switch(_frame(SYSTEMSTACK + 15), context()) is None
    # nor is an exact pc (the innermost frame), nor a function that switches nothing.
    assert planted.stack_switch(_frame(after_switch, exact=True), context()) is None
    assert planted.stack_switch(_frame(CALLER), context()) is None


def test_verdicts_are_kept_only_where_the_target_declares_a_cache():
    """plugin.target.Target declares code_verdicts and inside_unwinder (no debugger-only attribute)."""
    from plugin.strategies.planted import _remembered
    from plugin.target import Target
    calls = []

    def decide(frame, ctx):
        calls.append(frame.pc)
        return "verdict"
    frame = SimpleNamespace(pc=0x1000, exact_pc=False)
    target = Target()
    assert target.code_verdicts is None and target.inside_unwinder is False
    ctx = SimpleNamespace(target=target)
    assert _remembered(ctx, "k", frame, decide) == _remembered(ctx, "k", frame, decide) == "verdict"
    assert len(calls) == 2                      # no cache declared: decided each time
    target.code_verdicts = BoundedCache("code verdicts", 4)
    _remembered(ctx, "k", frame, decide), _remembered(ctx, "k", frame, decide)
    assert len(calls) == 3 and len(target.code_verdicts) == 1
    assert (target.code_verdicts.hits, target.code_verdicts.misses) == (1, 1)
    assert target.code_verdicts.get(("k", 0x1000, False)) == "verdict"
    target.inside_unwinder = True
    _remembered(ctx, "k", frame, decide)
    assert len(calls) == 4                      # inside the debugger's unwinder: not cached
