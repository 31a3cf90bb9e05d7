"""Our frames beside the debugger's own, frame by frame, with a verdict.

Both sides are lists of physical frames (inline frames already collapsed
by the adapter). Where they disagree we say which one looks right when the
code can tell: a return address must be executable and follow a call.
"""

from plugin.arch import reader


def native_entry(pc, sp, function=None):
    return {"pc": pc, "sp": sp, "function": function}


def compare(frames, native, ctx):
    """[{level, plugin, native, agrees, verdict}] for every level either side has."""
    rows = []
    arch = ctx.arch
    for level in range(max(len(frames), len(native))):
        ours = frames[level] if level < len(frames) else None
        theirs = native[level] if level < len(native) else None
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
            same_pc = ours.pc == theirs["pc"]
            same_sp = theirs.get("sp") is None or ours.registers.get(arch.sp) == theirs["sp"]
            row["agrees"] = same_pc and same_sp
            row["verdict"] = "agree" if row["agrees"] else _judge(ours.pc, theirs["pc"], level, ctx)
        rows.append(row)
    return rows


def _judge(our_pc, their_pc, level, ctx):
    if our_pc == their_pc:
        return "same pc, different stack pointer"
    if level == 0:
        return "different innermost pc"
    ours_ok = _plausible_return(our_pc, ctx)
    theirs_ok = _plausible_return(their_pc, ctx)
    if ours_ok and not theirs_ok:
        return "plugin looks right: 0x%x follows a %s; the debugger's 0x%x does not follow a call" % (
            our_pc, ours_ok, their_pc)
    if theirs_ok and not ours_ok:
        return "debugger looks right: 0x%x follows a %s; the plugin's 0x%x does not follow a call" % (
            their_pc, theirs_ok, our_pc)
    return "cannot tell which is right: both pcs %s" % ("follow a call" if ours_ok else "look wrong")


def _plausible_return(pc, ctx):
    if not ctx.is_code(pc):
        return None
    return ctx.arch.call_before(reader(ctx.read_memory), pc)


def summary(rows):
    bad = [r for r in rows if not r["agrees"]]
    if not bad:
        return "all %d frames agree" % len(rows)
    return "%d of %d frames disagree (first at level %d)" % (len(bad), len(rows), bad[0]["level"])
