"""The `scan` source: look up the stack for a word that is a return address.

The last resort, as in Breakpad and libtinyunwind: read a bounded window of
stack words upwards from sp and take the first one that looks like a return
address. A candidate must

  * point into executable memory: a module's executable segment, or an
    executable mapping (JIT code);
  * follow a call instruction (the arch's call_before: x86 `call rel32` and
    `call r/m`, aarch64 `bl`/`blr`), since a return address is the address
    right after a call;
  * resolve to a function (target.symbol) when it lies in a module whose
    file has a symbol table, so a stray pointer into a module's padding or
    data-in-text is not taken (a stripped library cannot tell).

Words that are not code at all are only counted; every code pointer that
was skipped is listed in the evidence with the reason. When every word up
to the top of the stack mapping was read and none qualifies, the frame is
the outermost one: nothing above it was ever a return address.

The caller's sp is the slot's address plus one word (the call pushed the
return address there; on aarch64 it is a lower bound, the frame record sits
at the bottom of the frame). The caller's frame pointer is the word below
the slot when the callee's frame pointer points at it (a frame record);
otherwise it is assumed unchanged. As for the frame-pointer source, other
registers are unknown. The result is written as a Row (CFA = sp + offset,
return address = [CFA - 1 word]) and evaluated like every table row.
"""

from plugin.modules import on_disk
from plugin.modules.module import ModuleFormat
from plugin.arch import arm, reader
from plugin.errors import MemoryReadError
from plugin.model.evidence import StepEvidence
from plugin.memory import PAGE
from plugin.model.rules import CfaKind, CfaRule, Row, Rule, RuleKind
from plugin.model.outcome import AttemptStatus, FailureKind, Outcome
from plugin.strategies.frame_pointer import (function_of, keep_only_known, may_save_frame_pointer, stack_edge,
                            sets_up_frame_pointer)
from plugin.strategies import sigframe
from plugin.strategies.row_step import step_with_row

SOURCE = "scan"
PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got", ".iplt")
MAX_LISTED = 24                 # skipped candidates listed one by one; the rest are counted
AT_STACK_TOP = " (the top of the stack)"
SYMTAB_CACHE_KEY = "scan: has .symtab"     # in module.cache: does the module's file have a .symtab?


def step(frame, ctx):
    """Recover frame's caller from the first plausible return address above sp."""
    arch = ctx.arch
    edge = stack_edge(frame, ctx, SOURCE)
    if edge is not None:
        return edge
    sp = frame.registers.get(arch.sp)
    if sp is None:
        return Outcome.not_applicable(SOURCE, "the stack pointer is unknown", FailureKind.UNKNOWN_REGISTER)
    alignment = arch.stack_alignment
    if sp % alignment:
        return Outcome.failed(SOURCE, "stack pointer 0x%x is not aligned to %d bytes: the stack is damaged, "
                                      "so it is not scanned" % (sp, alignment), FailureKind.MISALIGNED)
    words, end_note = read_stack_words(ctx, sp, ctx.scan_words)
    if not words:
        return Outcome.failed(SOURCE, "cannot read the stack at sp=0x%x" % sp, FailureKind.UNREADABLE_MEMORY)
    skipped, not_code = [], 0
    callee = _Callee(frame, ctx)
    for index, (slot, value) in enumerate(words):
        address = arch.strip_pointer_auth(value)
        problem, detail = candidate_problem(address, ctx)
        if problem is None:
            problem = stale_call(address, ctx, callee, words[index + 1:])
        if problem is None:
            return _recovered(frame, ctx, sp, slot, address, detail, skipped, not_code)
        if problem == "not code":
            not_code += 1
        else:
            skipped.append((slot, value, problem))
    last = words[-1][0]
    evidence = _evidence(frame, ctx, sp, len(words))
    _note_skipped(evidence, skipped, not_code, sp)
    if end_note == AT_STACK_TOP:
        # Every word up to the end of the stack was looked at: nothing above
        # this frame was ever a return address, so no caller's frame exists.
        reason = ("no return address between sp 0x%x and the top of the stack at 0x%x: outermost frame"
                  % (sp, last + arch.address_size))
        evidence.notes.append(reason)
        return Outcome(AttemptStatus.RECOVERED, SOURCE, reason, evidence=evidence, outermost=True)
    reason = "no return address in the %d words from 0x%x to 0x%x%s: %s" % (
        len(words), sp, last + arch.address_size, end_note, _skip_summary(skipped, not_code))
    return Outcome.failed(SOURCE, reason, FailureKind.NO_RETURN_ADDRESS, evidence=evidence)


def read_stack_words(ctx, sp, count):
    """[(address, value)] of up to `count` words from sp, and why the window ended early ("" if not).

    Reads go page by page, so the scan stops exactly where readable stack
    memory ends (the top of the stack) instead of failing as a whole.
    """
    arch = ctx.arch
    size = arch.address_size
    end = sp + count * size
    mapping = ctx.mapping_at(sp)
    end_note = ""
    if mapping is not None and mapping.end <= end:
        end, end_note = mapping.end, AT_STACK_TOP
    words = []
    address = sp
    while address < end:
        chunk_end = min(end, (address // PAGE + 1) * PAGE)
        try:
            data = ctx.read_memory(address, chunk_end - address)
        except MemoryReadError:
            return words, " (memory above 0x%x is unreadable)" % address
        for offset in range(0, len(data) - size + 1, size):
            words.append((address + offset, int.from_bytes(data[offset:offset + size], arch.byteorder)))
        address = chunk_end
    return words, end_note


def candidate_problem(address, ctx):
    """(None, (call form, function)) for a plausible return address, else (why not, None)."""
    if address == 0 or not ctx.is_code(address):
        return "not code", None
    call = ctx.arch.call_before(reader(ctx.read_memory), address)
    if call is None:
        # a Thumb restorer's address keeps bit 0 (the handler was entered with lr = restorer | 1)
        trampoline = sigframe.recognise(ctx, address & ~1 if ctx.arch.name == "arm" else address)
        if trampoline is None:
            return "code, but not right after a call instruction", None
        # The kernel planted it: no call precedes it, and it is named at itself.
        return None, ("signal trampoline (recognised by its %s)" % trampoline.by.value, ctx.symbol(address))
    function = ctx.symbol(address - 1)
    if function is None:
        module = ctx.modules.find(address - 1)
        if module is not None and has_symbol_table(module):
            return "follows a %s, but no function symbol of %s covers it" % (call, module.name), None
    return None, (call, function)


class _Callee:
    """What the scan knows of the frame being unwound: its function's start (symbol) and module."""

    def __init__(self, frame, ctx):
        pc = ctx.lookup_pc(frame)
        found = function_of(frame, ctx)
        self.start = found[1] if found else None
        self.name = found[0] if found else "the callee's function"
        self.module = ctx.modules.find(pc)


def stale_call(address, ctx, callee, above):
    """Why a plausible return address is a stale one left by earlier code, or None.

    Evidence only: the call before it is a direct call whose target is read
    from its bytes, and
      * the target is a pc thunk (`mov r32, [esp]; ret`), whose `ret`
        popped that word at once; or
      * the target cannot be the callee's function (not its start, when a
        symbol gives it; not in its module, when none does; not a PLT stub),
        and the next plausible word above follows a call that can be (its
        target is the callee's start, a PLT stub, or in the callee's module
        when its start is unknown).
    A tail call (a direct call to a function that jumps to the callee) would
    look alike, so without that second word the candidate is kept.
    """
    read = reader(ctx.read_memory)
    target = ctx.arch.direct_call_target(read, address)
    if target is None:
        return None
    if ctx.arch.returns_to_caller_at_once(read, target):
        return "follows a call to a pc thunk at 0x%x, which returned at once" % target
    if _may_enter(target, ctx, callee):
        return None
    for slot, value in above:
        later = ctx.arch.strip_pointer_auth(value)
        if candidate_problem(later, ctx)[0] is not None:
            continue
        later_target = ctx.arch.direct_call_target(read, later)
        if later_target is not None and _may_enter(later_target, ctx, callee):
            return ("follows a call to 0x%x, which is not %s, while [0x%x] = 0x%x above follows a call "
                    "to 0x%x, which can have entered it" % (target, _callee_words(callee), slot, later, later_target))
        return None
    return None


def _may_enter(target, ctx, callee):
    """Can a direct call to `target` have entered the callee's function (directly or via a PLT stub)?"""
    if callee.start is not None and target == callee.start:
        return True
    if _in_plt(target, ctx):
        return True
    module = ctx.modules.find(target)
    return callee.start is None and (module is None or callee.module is None or module is callee.module)


def _callee_words(callee):
    if callee.start is not None:
        return "%s's start 0x%x nor a PLT stub" % (callee.name, callee.start)
    return "in %s (the callee's module) nor a PLT stub" % (callee.module.name if callee.module else "?")


def _in_plt(address, ctx):
    """Does `address` lie in a PLT section of its module's file?"""
    module = ctx.modules.find(address)
    if module is None or not module.path or module.format != ModuleFormat.ELF:
        return False
    try:
        headers = on_disk.sections(module.path)
    except OSError:
        return False
    for name in PLT_SECTIONS:
        header = headers.get(name)
        if header is not None and 0 <= address - header.address - module.load_bias < header.size:
            return True
    return False


def has_symbol_table(module):
    """Does the module's file have a full symbol table (.symtab)?

    Only then can "no function here" be believed: a stripped library (libc
    on Debian keeps only .dynsym) has functions no symbol names.
    """
    cached = module.cache.get(SYMTAB_CACHE_KEY)
    if cached is None:
        try:
            cached = ".symtab" in on_disk.sections(module.path) if module.path else False
        except OSError:
            cached = False
        module.cache[SYMTAB_CACHE_KEY] = cached
    return cached


def _recovered(frame, ctx, sp, slot, address, detail, skipped, not_code):
    arch = ctx.arch
    size = arch.address_size
    call, function = detail
    cfa_offset = slot + size - sp
    fp = frame.registers.get(arch.fp)
    row = Row(address=ctx.lookup_pc(frame), cfa=CfaRule(CfaKind.REGISTER, register=arch.sp, offset=cfa_offset),
              registers={arch.ra: Rule(RuleKind.OFFSET, offset=-size)}, ra_signed=arch.pointer_auth)
    evidence = _evidence(frame, ctx, sp, (slot - sp) // size + 1)
    evidence.found_by = "stack scan: return address at [%s+0x%x]" % (arch.name_of(arch.sp), slot - sp)
    evidence.entry.update({"slot": slot, "return_address": address, "call": call,
                           "caller_function": function[0] if function else None})
    row.registers[arch.fp], why = _caller_frame_pointer_rule(frame, ctx, fp, slot)
    evidence.notes.append(why)
    where = function[0] if function else "code outside every module"
    evidence.notes.append("[0x%x] = 0x%x follows a %s, in %s" % (slot, address, call, where))
    _note_skipped(evidence, skipped, not_code, sp)
    outcome = step_with_row(row, frame, ctx, evidence)
    mode = (outcome.registers or {}).get(arm.CPSR) if arch.name == "arm" else None
    outcome = keep_only_known(outcome, arch, "a stack scan")
    if mode is not None and outcome.status == AttemptStatus.RECOVERED:
        # the caller's instruction set is bit 0 of the return address: its code can be read (Thumb or Arm)
        outcome.registers[arm.CPSR] = mode
        evidence.notes.append("the caller's cpsr is the callee's with its T bit from bit 0 of the return "
                              "address 0x%x: %s code" % (address, "Thumb" if address & 1 else "Arm"))
    return outcome


def _caller_frame_pointer_rule(frame, ctx, fp, slot):
    """(rule for the caller's frame pointer, why).

    A function that keeps a frame pointer stores the caller's right below its
    return address, so that word is the caller's frame pointer whenever the
    callee keeps one: the callee's frame pointer points at it, or its code
    sets one up. A callee that keeps none may have reused the register, so
    the caller's is unknown; with no symbol to tell, it is assumed unchanged.
    """
    arch = ctx.arch
    name = arch.name_of(arch.fp)
    saved_below = Rule(RuleKind.OFFSET, offset=-2 * arch.address_size)
    if fp is not None and fp == slot - arch.address_size:
        return saved_below, ("the callee's %s points at the word below the return address: that word is "
                             "the caller's saved %s" % (name, name))
    function = function_of(frame, ctx)
    pc = ctx.lookup_pc(frame)
    keeps = sets_up_frame_pointer(ctx, function[1], pc) if function else None
    if keeps:
        return saved_below, ("%s keeps a frame pointer, so the word below the return address is the "
                             "caller's saved %s" % (function[0], name))
    if keeps is False and may_save_frame_pointer(ctx, function[1], pc):
        return Rule(RuleKind.UNDEFINED), ("%s keeps no frame pointer and may have reused %s: the caller's %s "
                                       "is unknown" % (function[0], name, name))
    if keeps is False:
        return Rule(RuleKind.SAME), ("%s neither keeps nor saves %s before this point: the caller's is the "
                                  "same" % (function[0], name))
    return Rule(RuleKind.SAME), ("the caller's %s is assumed unchanged (no symbol tells whether the callee "
                              "keeps a frame pointer)" % name)


def _evidence(frame, ctx, sp, words):
    pc = ctx.lookup_pc(frame)
    module = ctx.modules.find(pc)
    found = ctx.symbol(pc)
    return StepEvidence(source=SOURCE, found_by="stack scan", lookup_pc=pc,
                        module=module.name if module else None, section="stack", section_address=sp,
                        entry={"start": found[1] if found else pc, "scanned_from": sp,
                               "window_words": ctx.scan_words, "words_read": words})


def _note_skipped(evidence, skipped, not_code, sp):
    evidence.entry["skipped_code_pointers"] = len(skipped)
    evidence.entry["skipped_not_code"] = not_code
    for slot, value, problem in skipped[:MAX_LISTED]:
        evidence.notes.append("skipped [sp+0x%x] = 0x%x: %s" % (slot - sp, value, problem))
    if len(skipped) > MAX_LISTED:
        evidence.notes.append("skipped %d more code pointers" % (len(skipped) - MAX_LISTED))
    if not_code:
        evidence.notes.append("skipped %d words that are not addresses of code" % not_code)


def _skip_summary(skipped, not_code):
    parts = ["%d words are not code" % not_code]
    if skipped:
        parts.append("%d code pointers do not look like return addresses (first: 0x%x, %s)"
                     % (len(skipped), skipped[0][1], skipped[0][2]))
    return "; ".join(parts)
