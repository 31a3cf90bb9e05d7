"""x86 instructions decoded once per text: capstone's (address, size, mnemonic, op_str) as an Insn.

plugin.analysis.x86 turns an instruction's text into its effects; most texts recur all over a
module, so each is decoded once and copied where it recurs (with its own address and size), unless
its effects name its address: a rip-relative operand, a realignment, i386's call to the next
instruction (decoded each time), a direct jump, branch or call (made from the last one of its
mnemonic, with its own target), `cmp x, imm` (the last of its effects names its address); one Decoder
per dialect holds what it decoded. decode_flow is what the control-flow pass (plugin.analysis.noreturn)
reads: only jumps, calls, returns, stops.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from plugin.analysis.bounds import BOUND_PENDING
from plugin.analysis.ops import Flow, Insn, Step
from plugin.analysis.x86 import PREFIXES, STOPS, Dialect, decode_text


def is_flow(mnemonic: str) -> bool:
    """Is the instruction a jump, call, return or stop (what decode_flow decodes in full)?"""
    bare = mnemonic
    if " " in bare:                 # every prefix ends with a space
        for prefix in PREFIXES:
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
    return bare.startswith(("j", "loop", "ret", "call")) or bare in STOPS


MAX_DECODED = 1 << 16             # texts of a dialect kept decoded at most (memory)


class Decoder:
    """decode() and decode_flow() of one dialect, with what it decoded before: by text (mnemonic,
    operands) an Insn whose effects do not name its address; by mnemonic, the last direct jump, branch
    or call (every other one with that mnemonic and a target written "0x..." differs from it only in
    its address, size, text and target); by text, a `cmp x, imm` decoded before."""

    def __init__(self, d: Dialect):
        self.d = d
        self._decoded: Dict[Tuple[str, str], Insn] = {}
        self._direct: Dict[str, Insn] = {}
        self._compares: Dict[Tuple[str, str], Insn] = {}

    def decode(self, address: int, size: int, mnemonic: str, op_str: str) -> Insn:
        """One capstone (address, size, mnemonic, op_str) as an Insn; the same text decodes to the same
        effects wherever it is, unless they name its address (rip-relative operands, a compare's pending
        bound, a realignment, a call to the next instruction): those are decoded each time. A direct
        jump, branch or call is made from the last one of its mnemonic (its target aside, they agree)."""
        d = self.d
        if op_str[:2] == "0x":
            found = self._direct.get(mnemonic)
            target = _target(d, found, address + size, op_str)
            if target is not None:
                return Insn(address, size, mnemonic + " " + op_str, found.effects, found.flow, target,
                            None, False, 0, found.bound_kept, found.flags_kept)
        key = mnemonic, op_str
        found = self._decoded.get(key)
        if found is not None:
            return Insn(address, size, found.text, found.effects, found.flow, found.target, found.indirect,
                        found.through_memory, found.popped, found.bound_kept, found.flags_kept)
        found = self._compares.get(key)
        if found is not None:
            return Insn(address, size, found.text, found.effects[:-1] + [_pending_at(address)], found.flow,
                        found.target, found.indirect, found.through_memory, found.popped, found.bound_kept,
                        found.flags_kept)
        insn = decode_text(d, address, size, mnemonic, op_str)
        if op_str[:2] == "0x" and insn.flow in (Flow.JUMP, Flow.BRANCH, Flow.CALL) and _is_direct(insn, op_str):
            self._direct[mnemonic] = insn
        elif mnemonic == "cmp" and not (d.pc_name and d.pc_name in op_str) and insn.effects \
                and insn.effects[-1] == _pending_at(address):
            _keep(self._compares, key, insn)
        elif not (d.pc_name and d.pc_name in op_str) and not (d.call_next_pushes and "call" in mnemonic) \
                and not (("cmp" in mnemonic or "and" in mnemonic) and _names(insn.effects, address)):
            _keep(self._decoded, key, insn)     # e.g. a compare of two registers: no address in it
        return insn

    def decode_flow(self, address: int, size: int, mnemonic: str, op_str: str) -> Optional[Step]:
        """What the control-flow pass (plugin.analysis.noreturn) reads of a jump, call, return or stop;
        None for an instruction that falls through. A direct one makes no Insn."""
        flow = _FLOW.get(mnemonic)
        if flow is None:
            flow = _FLOW[mnemonic] = is_flow(mnemonic)
        if not flow:
            return None
        if op_str[:2] == "0x":
            found = self._direct.get(mnemonic)
            target = _target(self.d, found, address + size, op_str)
            if target is not None:
                return Step(found.flow, address + size, target)
        return Step.of(self.decode(address, size, mnemonic, op_str))


_FLOW: Dict[str, bool] = {}        # mnemonic -> is_flow(mnemonic): a few hundred, asked once per instruction


def _target(d: Dialect, found: Optional[Insn], end: int, op_str: str) -> Optional[int]:
    """The target of a direct jump, branch or call made from `found`, the last one of its mnemonic
    (None: none yet, op_str names no target, or i386's call to the next instruction)."""
    if found is None:
        return None
    target = _hex(op_str)
    if target is None or d.call_next_pushes and target == end and found.flow is Flow.CALL:
        return None
    return target


def _keep(cache: dict, key, insn: Insn) -> None:
    if len(cache) >= MAX_DECODED:
        cache.clear()
    cache[key] = insn


def _names(effects, address: int) -> bool:
    """Does the address appear in the effects (a compare's pending bound, a realignment's new base;
    an immediate equal to it too, which only costs a decoding each time)?"""
    return any(_names(part, address) if isinstance(part, (tuple, list)) else part == address
               for part in effects)


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
