"""The shadow call stack oracle (tests/helpers/shadow_stack.py) on a hand-written qemu log."""
from shadow_stack import CALL, SIGNAL, _replay


def _block(start, insns):
    """qemu's `-d in_asm` text of one block: [(address, bytes hex, mnemonic, operands)]."""
    lines = ["----------------", "IN: "]
    lines += ["0x%08x:  %s  %s %s" % (a, code, m, ops) for a, code, m, ops in insns]
    return lines + [""]


def _trace(pc):
    return "Trace 0: 0x7f0000000000 [00000480/%08x/00000000/00000200] " % pc


def test_calls_returns_and_a_signal():
    log = []
    log += _block(0x1000, [(0x1000, "f000 f800", "bl", "#0x2000")]) + [_trace(0x1000)]        # main calls f
    log += _block(0x2000, [(0x2000, "b500", "push", "{lr}"), (0x2002, "f000 f800", "bl", "#0x3000")])
    log += [_trace(0x2000)]                                                                   # f calls g
    log += _block(0x3000, [(0x3000, "4770", "bx", "lr")]) + [_trace(0x3000)]                 # g returns
    log += _block(0x2006, [(0x2006, "df00", "svc", "#0")]) + [_trace(0x2006)]                # f: svc, signal
    log += _block(0x4000, [(0x4000, "f000 f800", "blne", "#0x5000")]) + [_trace(0x4000)]     # handler calls stop
    log += [_trace(0x5000)]
    assert _replay(log, 0x5000) == [(0x4004, CALL), (0x2008, SIGNAL), (0x1004, CALL)]


def test_a_conditional_call_not_taken_pushes_nothing():
    log = _block(0x1000, [(0x1000, "f000 f800", "blne", "#0x2000")]) + [_trace(0x1000)]
    log += _block(0x1004, [(0x1004, "e7fe", "b", "#0x6000")]) + [_trace(0x1004), _trace(0x6000)]
    assert _replay(log, 0x6000) == []


def test_never_entered():
    assert _replay(_block(0x1000, [(0x1000, "4770", "bx", "lr")]) + [_trace(0x1000)], 0x9000) is None
