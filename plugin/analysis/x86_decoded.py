"""x86 instructions decoded once per text: capstone's (address, size, mnemonic, op_str) as an Insn.

plugin.analysis.x86 turns an instruction's text into its effects; most texts recur all over a
module, so each is decoded once and copied where it recurs (with its own address and size), unless
its effects name its address: a rip-relative operand, a realignment, i386's call to the next
instruction (decoded each time), a direct jump, branch or call (made from the last one of its
mnemonic, with its own target), `cmp x, imm` (the last of its effects names its address). decode_flow
is what the control-flow pass (plugin.analysis.noreturn) reads: only jumps, calls, returns, stops.
"""
from __future__ import annotations

from typing import Dict, Tuple

from plugin.analysis.bounds import BOUND_PENDING
from plugin.analysis.ops import Flow, Insn
from plugin.analysis.x86 import _PREFIXES, _STOPS, Dialect, _decode


def is_flow(mnemonic: str) -> bool:
    """Is the instruction a jump, call, return or stop (what decode_flow decodes in full)?"""
    bare = mnemonic
    if " " in bare:                 # every prefix ends with a space
        for prefix in _PREFIXES:
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
    return bare.startswith(("j", "loop", "ret", "call")) or bare in _STOPS


def decode_flow(d: Dialect, address, size, mnemonic, op_str):
    """decode() where only the control flow is asked for (plugin.analysis.noreturn): None for an
    instruction that is not a jump, call, return or stop (it falls through)."""
    flow = _FLOW.get(mnemonic)
    if flow is None:
        flow = _FLOW[mnemonic] = is_flow(mnemonic)
    return decode(d, address, size, mnemonic, op_str) if flow else None


_FLOW: Dict[str, bool] = {}        # mnemonic -> is_flow(mnemonic): a few hundred, asked once per instruction


_DECODED: Dict[Tuple[int, str, str], Insn] = {}   # (dialect, mnemonic, operands) -> an Insn decoded before
MAX_DECODED = 1 << 16                               # of them kept at most (memory)
# (dialect, mnemonic) -> a direct jump, branch or call decoded before: every other one with that mnemonic
# and a target written "0x..." differs from it only in its address, size, text and target
_DIRECT: Dict[Tuple[int, str], Insn] = {}
_COMPARES: Dict[Tuple[int, str, str], Insn] = {}   # (dialect, "cmp", operands) -> a `cmp x, imm` decoded before


def decode(d: Dialect, address, size, mnemonic, op_str):
    """One capstone (address, size, mnemonic, op_str) as an Insn; the same text decodes to the same
    effects wherever it is, unless they name its address (rip-relative operands, a compare's pending
    bound, a realignment, a call to the next instruction): those are decoded each time. A direct
    jump, branch or call is made from the last one of its mnemonic (its target aside, they agree)."""
    if op_str[:2] == "0x":
        found = _DIRECT.get((id(d), mnemonic))
        target = _hex(op_str) if found is not None else None
        if target is not None:
            if not (d.call_next_pushes and target == address + size and found.flow is Flow.CALL):
                return Insn(address, size, mnemonic + " " + op_str, found.effects, found.flow, target,
                            None, False, 0, found.bound_kept, found.flags_kept)
    key = (id(d), mnemonic, op_str)
    found = _DECODED.get(key)
    if found is not None:
        return Insn(address, size, found.text, found.effects, found.flow, found.target, found.indirect,
                    found.through_memory, found.popped, found.bound_kept, found.flags_kept)
    found = _COMPARES.get(key)
    if found is not None:
        return Insn(address, size, found.text, found.effects[:-1] + [_pending_at(address)], found.flow,
                    found.target, found.indirect, found.through_memory, found.popped, found.bound_kept,
                    found.flags_kept)
    insn = _decode(d, address, size, mnemonic, op_str)
    if op_str[:2] == "0x" and insn.flow in (Flow.JUMP, Flow.BRANCH, Flow.CALL) and _is_direct(insn, op_str):
        _DIRECT[(id(d), mnemonic)] = insn
    elif mnemonic == "cmp" and not (d.pc_name and d.pc_name in op_str) and insn.effects \
            and insn.effects[-1] == _pending_at(address):
        if len(_COMPARES) >= MAX_DECODED:
            _COMPARES.clear()
        _COMPARES[key] = insn
    elif not (d.pc_name and d.pc_name in op_str) and "cmp" not in mnemonic and "and" not in mnemonic \
            and not (d.call_next_pushes and "call" in mnemonic):
        if len(_DECODED) >= MAX_DECODED:
            _DECODED.clear()
        _DECODED[key] = insn
    return insn


def _pending_at(address: int) -> tuple:
    """The effect by which `cmp x, imm` at address makes its bound wait for the branch after it: the one
    effect of such a compare that names its address (its others are the same wherever it is)."""
    return ("set", BOUND_PENDING, ("addr", address))


def _hex(text: str):
    try:
        return int(text, 16)
    except ValueError:
        return None


def _is_direct(insn: Insn, op_str: str) -> bool:
    """Is insn a jump, branch or call to the target op_str names, and nothing else that op_str decides?"""
    target = _hex(op_str)
    return target is not None and insn.target == target and insn.indirect is None and not insn.through_memory \
        and not insn.popped
