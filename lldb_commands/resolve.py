"""Turn the ADDRESS|FUNCTION argument of `unwind tables` into an address.

Tried in order, cheapest first: a number (0x1360, 4960), a register of the
selected frame ($pc, $rsp), a function or symbol name with an optional
+OFFSET (main, stop_here+4), and last LLDB's expression evaluator (which
needs clang to start up, so only when nothing simpler applies).

The answer carries the SBModule the address belongs to: without a process
each module has its own file addresses (see target.py), so a function in
libc must be looked up in libc's tables, not in whichever module happens
to cover the same number.
"""

import re

import lldb

from .options import UsageError

_NAME_PLUS = re.compile(r"^(?P<name>[^\s+]+)\s*\+\s*(?P<offset>\S+)$")


def resolve(text, sbtarget, frame, live):
    """(address, SBModule or None) for `text`; UsageError if it names nothing."""
    text = text.strip()
    number = _number(text)
    if number is not None:
        if not 0 <= number < 1 << (8 * (sbtarget.GetAddressByteSize() or 8)):
            raise UsageError("%s is not an address of this target" % text)
        return number, None if live else _module_at(sbtarget, number)
    if text.startswith("$") and (frame is None or not frame.IsValid()):
        raise UsageError("%s: registers need a stopped process" % text)
    if text.startswith("$"):
        value = frame.FindRegister(text[1:])
        error = lldb.SBError()
        if value.IsValid():
            address = value.GetValueAsUnsigned(error, 0)
            if error.Success():
                return address, None if live else _module_at(sbtarget, address)
    offset = 0
    name = text
    match = _NAME_PLUS.match(text)
    if match and _number(match.group("offset")) is not None:
        name, offset = match.group("name"), _number(match.group("offset"))
    found = _function(sbtarget, name, live)
    if found is not None:
        return found[0] + offset, found[1]
    return _evaluate(text, sbtarget, frame, live)


def _number(text):
    try:
        return int(text, 0)
    except ValueError:
        return None


def _module_at(sbtarget, address):
    """The module whose sections hold file address `address` (the first one, as LLDB resolves)."""
    for sbmodule in sbtarget.module_iter():
        if sbmodule.ResolveFileAddress(address).GetSection().IsValid():
            return sbmodule
    return sbtarget.GetModuleAtIndex(0) if sbtarget.GetNumModules() else None


def _function(sbtarget, name, live):
    """(start address, SBModule) of a function or code symbol called `name`, or None."""
    matches = sbtarget.FindFunctions(name, lldb.eFunctionNameTypeAuto)
    candidates = []
    for i in range(matches.GetSize()):
        context = matches.GetContextAtIndex(i)
        for owner in (context.GetFunction(), context.GetSymbol()):
            if owner.IsValid():
                candidates.append((owner.GetStartAddress(), context.GetModule()))
                break
    if not candidates:
        symbols = sbtarget.FindSymbols(name, lldb.eSymbolTypeCode)
        for i in range(symbols.GetSize()):
            context = symbols.GetContextAtIndex(i)
            if context.GetSymbol().IsValid():
                candidates.append((context.GetSymbol().GetStartAddress(), context.GetModule()))
    for start, sbmodule in candidates:
        address = start.GetLoadAddress(sbtarget) if live else start.GetFileAddress()
        if address != lldb.LLDB_INVALID_ADDRESS:
            return address, sbmodule
    return None


def _evaluate(text, sbtarget, frame, live):
    options = lldb.SBExpressionOptions()
    options.SetTimeoutInMicroSeconds(5 * 1000 * 1000)
    if frame is not None and frame.IsValid():
        value = frame.EvaluateExpression(text, options)
    else:
        value = sbtarget.EvaluateExpression(text, options)
    error = value.GetError() if value.IsValid() else None
    if value.IsValid() and error is not None and error.Success():
        number_error = lldb.SBError()
        address = value.GetValueAsUnsigned(number_error, 0)
        if number_error.Success():
            return address, None if live else _module_at(sbtarget, address)
    why = (error.GetCString() if error is not None else None) or ""
    # LLDB's message spans lines ("expression failed to parse:\nerror: ..."): keep it on one.
    why = " ".join(line.strip() for line in why.splitlines() if line.strip())
    raise UsageError("cannot evaluate %r: %s" % (text, why or "not a number, register, function or expression"))
