"""Return addresses a runtime plants on a new stack instead of pushing them with a call.

A stack made by a runtime, not by calls, starts with a return address the
runtime wrote there, so that the stack's first function "returns" into code
that ends the stack:

    runtime.goexit + 1 instruction   Go: the top of every goroutine's stack
                                     (goexit's first instruction is a nop, so
                                     the address lies inside goexit)
    __start_context                  glibc's makecontext: where a context's
                                     function returns to, which then switches
                                     to uc_link

Such an address follows no call, and the function it lies in is the
stack's outermost frame: nothing above it on this stack is a caller. The
evidence is the address itself: it is exactly the planted one (function
start from symbols plus the planted offset), which a call cannot produce.

Runtimes also switch stacks: Go's runtime.systemstack and runtime.mcall call
their function on the g0 stack, runtime.morestack calls newstack there. A
frame whose return address is such a call (the indirect call after the
switch, for systemstack and mcall) has its caller on the goroutine's stack,
saved in the goroutine's g, not above it on this stack: stack_switch says
so, and the walk stops there instead of reading g0's stale words as frames.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from plugin.arch import reader


class Planter(NamedTuple):
    function: str           # the symbol, without Go's ABI suffix
    instructions: int       # how many (minimum-size) instructions past its start the planted address is
    runtime: str
    why: str


PLANTERS = (
    Planter("runtime.goexit", 1, "Go",
            "the Go runtime plants %s as the return address at the top of every goroutine's "
            "stack: runtime.goexit is the goroutine's outermost frame"),
    Planter("__start_context", 0, "glibc makecontext",
            "makecontext plants %s as the return address of a context's function: it ends the "
            "context (and switches to uc_link), so it is the outermost frame of this stack"),
)

_SUFFIXES = (".abi0", ".abiinternal")       # Go's assembly and ABI-wrapper symbol names


class Switcher(NamedTuple):
    function: str
    indirect_only: bool     # only its indirect call runs on the other stack


SWITCHERS = (Switcher("runtime.systemstack", True), Switcher("runtime.mcall", True),
             Switcher("runtime.morestack", False))
INDIRECT_CALLS = ("call r/m", "blr", "blra")    # the names plugin/arch's call_before gives indirect calls


def _bare(name):
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def planted_at(ctx, pc: int) -> Optional[Planter]:
    """The Planter whose planted return address pc is exactly, or None."""
    found = ctx.symbol(pc)
    if found is None:
        return None
    name, start = found
    if start is None:
        return None
    for planter in PLANTERS:
        if _bare(name) == planter.function and pc == start + planter.instructions * ctx.arch.min_instruction_size:
            return planter
    return None


def _planted_name(planter, ctx):
    offset = planter.instructions * ctx.arch.min_instruction_size
    return "%s+%d" % (planter.function, offset) if offset else planter.function


def describe(ctx, pc: int) -> Optional[str]:
    """"is runtime.goexit+1, the return address ... plants" for a planted pc, else None."""
    planter = planted_at(ctx, pc)
    if planter is None:
        return None
    return "is %s, the return address %s plants without a call" % (_planted_name(planter, ctx), planter.runtime)


def outermost(frame, ctx) -> Optional[str]:
    """Why frame is its stack's outermost one, when its pc is a planted return address (checked
    only where the bytes before it are not a call, so ordinary frames cost one small read), else None."""
    return _remembered(ctx, "outermost", frame, _outermost)


def stack_switch(frame, ctx) -> Optional[str]:
    """Why frame's caller is on another stack (a runtime switched stacks at this call), or None."""
    return _remembered(ctx, "switch", frame, _stack_switch)


VERDICTS_SIZE = 65536


def _remembered(ctx, kind, frame, decide):
    """decide(frame, ctx), kept per (kind, pc, exact pc) where the target keeps code_verdicts
    (plugin.target.Target: a plugin.cache.BoundedCache of VERDICTS_SIZE it clears at every stop and module change; the verdict rests
    on code bytes and symbols only), so a deep recursion reads the bytes before its return
    address once. Not while inside the debugger's unwinder, where fewer symbols can be looked up."""
    target = getattr(ctx, "target", None)       # None: a context built without one (tests)
    verdicts = None if target is None else target.code_verdicts
    if verdicts is None or target.inside_unwinder:
        return decide(frame, ctx)
    return verdicts.lookup((kind, frame.pc, frame.exact_pc), decide, frame, ctx)


def _outermost(frame, ctx):
    if frame.exact_pc or ctx.arch.call_before(reader(ctx.read_memory), frame.pc) is not None:
        return None
    planter = planted_at(ctx, frame.pc)
    return None if planter is None else planter.why % _planted_name(planter, ctx)


def _stack_switch(frame, ctx):
    found = None if frame.exact_pc else ctx.symbol(ctx.lookup_pc(frame))
    if found is None:
        return None
    name = found[0]
    switcher = next((s for s in SWITCHERS if s.function == _bare(name)), None)
    if switcher is None:
        return None
    call = ctx.arch.call_before(reader(ctx.read_memory), frame.pc)
    if call is None or switcher.indirect_only and call not in INDIRECT_CALLS:
        return None
    return ("%s called its function on the g0 stack (the %s before 0x%x): the goroutine's frames are saved in "
            "its g, not above this frame on this stack" % (switcher.function, call, frame.pc))
