"""Our frames beside the debugger's own, frame by frame, with a verdict.

Both sides are lists of physical frames (inline frames already collapsed
by the adapter). Where they disagree we say which one looks right when the
code can tell: a return address must be executable and follow a call, or be
one a runtime plants without a call (plugin/strategies/planted.py), or a
signal trampoline the kernel planted (plugin/strategies/sigframe.py); those
are never held against either side.
"""

from __future__ import annotations

from plugin.arch import reader
from plugin.strategies import planted, sigframe


def native_entry(pc, sp, function=None):
    return {"pc": pc, "sp": sp, "function": function}


LOOKAHEAD = 4       # frames one side may have that the other has not, before the two meet again


def compare(frames, native, ctx):
    """[{level, plugin, native, agrees, verdict}] for every frame either side has, in walk order.

    Frames are paired level by level, except where one side has frames the other has not and
    then both meet again at the same pc and sp (within LOOKAHEAD frames): those frames get a row
    of their own, so the frames after them are compared with their equal, not with a neighbour."""
    rows = []
    arch = ctx.arch
    for ours, theirs, their_level in _paired(frames, native, arch):
        level = ours.level if ours is not None else theirs.get("level", their_level)
        row = {"level": level,
               "plugin": None if ours is None else {
                   "pc": ours.pc, "sp": ours.registers.get(arch.sp), "function": ours.function,
                   "method": ours.method},
               "native": theirs}
        if ours is None or theirs is None:
            row["agrees"] = False
            row["verdict"] = ("only the debugger has this frame" if ours is None
                              else "only the plugin has this frame")
        else:
            row["agrees"] = _same(ours, theirs, arch)
            row["verdict"] = "agree" if row["agrees"] else _judge(ours.pc, theirs["pc"], level, ctx,
                                                                  getattr(ours, "exact_pc", False))
        rows.append(row)
    return rows


def _same(ours, theirs, arch) -> bool:
    return ours.pc == theirs["pc"] and (theirs.get("sp") is None or ours.registers.get(arch.sp) == theirs["sp"])


def _paired(frames, native, arch):
    """[(our frame or None, the debugger's or None, the debugger's index or None)], in walk order."""
    out = []
    i = j = 0
    while i < len(frames) or j < len(native):
        if i < len(frames) and j < len(native) and not _same(frames[i], native[j], arch):
            theirs_more = next((k for k in range(1, LOOKAHEAD + 1)
                                if j + k < len(native) and _same(frames[i], native[j + k], arch)), None)
            ours_more = next((k for k in range(1, LOOKAHEAD + 1)
                              if i + k < len(frames) and _same(frames[i + k], native[j], arch)), None)
            if theirs_more is not None and (ours_more is None or theirs_more <= ours_more):
                out.extend((None, native[j + k], j + k) for k in range(theirs_more))
                j += theirs_more
                continue
            if ours_more is not None:
                out.extend((frames[i + k], None, None) for k in range(ours_more))
                i += ours_more
                continue
        ours = frames[i] if i < len(frames) else None
        theirs = native[j] if j < len(native) else None
        out.append((ours, theirs, j if theirs is not None else None))
        i, j = i + (ours is not None), j + (theirs is not None)
    return out


def _judge(our_pc, their_pc, level, ctx, exact=False):
    """Which side looks right, resting only on bytes that were read: where the code before
    a pc could not be read, that pc's plausibility is unknown and no side is called right.
    exact: the plugin's frame is one a signal interrupted, whose pc is no return address."""
    if our_pc == their_pc:
        return "same pc, different stack pointer"
    if level == 0:
        return "different innermost pc"
    if exact:
        (ours_ok, ours_known), (theirs_ok, theirs_known) = _plausible_exact(our_pc, ctx), _plausible_exact(their_pc, ctx)
    else:
        (ours_ok, ours_known), (theirs_ok, theirs_known) = _plausible_return(our_pc, ctx), _plausible_return(their_pc, ctx)
    if not (ours_known and theirs_known):
        unread = [pc for pc, known in ((our_pc, ours_known), (their_pc, theirs_known)) if not known]
        return "unknown: the code before %s cannot be read, so neither side can be judged" % (
            " and ".join("0x%x" % pc for pc in unread))
    wrong = "is not code" if exact else "does not follow a call"
    if ours_ok and not theirs_ok:
        return "plugin looks right: 0x%x %s; the debugger's 0x%x %s" % (our_pc, ours_ok, their_pc, wrong)
    if theirs_ok and not ours_ok:
        return "debugger looks right: 0x%x %s; the plugin's 0x%x %s" % (their_pc, theirs_ok, our_pc, wrong)
    return "cannot tell which is right: both pcs %s" % (
        ("are code" if exact else "look like return addresses") if ours_ok else "look wrong")


def _plausible_exact(pc, ctx):
    """(why pc is plausible for a frame a signal interrupted, which may stop at any instruction; known)."""
    return ("is code (a frame a signal interrupted stops at any instruction)" if ctx.is_code(pc) else None), True


def _plausible_return(pc, ctx):
    """(why pc is a plausible return address: "follows a call rel32", or None; whether that
    answer rests on bytes read)."""
    if not ctx.is_code(pc):
        return None, True
    planted_here = _planted(pc, ctx)
    if planted_here:
        return planted_here, True
    failed = []
    read = reader(ctx.read_memory)

    def tracking(address, size):
        data = read(address, size)
        if data is None:
            failed.append(address)
        return data
    call = ctx.arch.call_before(tracking, pc)
    if call is None:
        trampoline = sigframe.recognise(ctx, pc)
        if trampoline is not None:
            return "is a signal trampoline (%s)" % trampoline.why, True
    return call and "follows a %s" % call, call is not None or not failed


def _planted(pc, ctx):
    """"is runtime.goexit+1, ..." when pc is a return address a runtime plants, else None."""
    try:
        return planted.describe(ctx, pc)
    except Exception:       # symbols only help
        return None


def summary(rows):
    bad = [r for r in rows if not r["agrees"]]
    if not bad:
        return "all %d frames agree" % len(rows)
    return "%d of %d frames disagree (first at level %d)" % (len(bad), len(rows), bad[0]["level"])
