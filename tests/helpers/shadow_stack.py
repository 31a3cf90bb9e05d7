"""An oracle for 32-bit Arm frames that owes nothing to unwind tables: a shadow call stack.

qemu-arm logs every translation block it translates (`-d in_asm`: the
block's instructions, disassembled by qemu) and every block it runs
(`-d exec`, with `nochain` so that no block runs unlogged). Replaying that
log: a block that ends in a call (`bl`, `blx`, any condition) and is left
for somewhere other than the instruction after it pushes that instruction's
address (the return address); a block left through an indirect branch (`bx
lr`, `pop {.., pc}`, `ldr pc, ..`, `ldm .., pc`) for an address on the
shadow stack pops down to it (a return, or a longjmp to an older frame).
A block that ends in `svc` and is left for somewhere other than the
instruction after it delivered a signal (unless it returns to an address
on the stack: a sigreturn): the address after the `svc` is pushed as the
interrupted pc, marked SIGNAL. When the program first enters `stop` (a
function's entry address), the shadow stack, innermost first, is the list
of (address, kind) the frames above the stop must have (bit 0, the Thumb
bit, cleared): a CALL's address is a caller frame's return address; a
SIGNAL stands for two frames, the signal trampoline's (its address is the
restorer the handler returns to, not seen here) and the interrupted one,
whose pc is exactly that address.
"""
import re
import subprocess

_INSN = re.compile(r"^0x([0-9a-f]+):\s+((?:[0-9a-f]{4,8} ?)+)\s+(\S+)\s*(.*)$")
_TRACE = re.compile(r"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/")
_DIRECT = re.compile(r"^(b|bl|blx|cbz|cbnz)(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le)?(\.w|\.n)?$")


CALL, SIGNAL = "call", "signal"
_CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le")


def _is_call(mnemonic):
    """bl, blx and their conditional forms (`blne`; not `ble`/`blt`, which are b<cond>)."""
    base = mnemonic.split(".")[0]
    return base in ("bl", "blx") or (len(base) == 4 and base[:2] == "bl" and base[2:] in _CONDITIONS) \
        or (len(base) == 5 and base[:3] == "blx" and base[3:] in _CONDITIONS)


def shadow_stack(emulator, sysroot, binary, args, stop, timeout=300):
    """[(address, CALL or SIGNAL)], innermost first, when `binary` (run under `emulator` with the
    sysroot's libraries) first enters address `stop`; None if it never does."""
    proc = subprocess.Popen([emulator, "-L", str(sysroot), "-d", "in_asm,exec,nochain", str(binary), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, errors="replace")
    try:
        return _replay(proc.stderr, stop & ~1)
    finally:
        proc.kill()
        proc.wait(timeout=timeout)
        proc.stderr.close()


def _replay(lines, stop):
    blocks = {}            # block start -> (last instruction's address, its size, its mnemonic, operands)
    current, last = None, None
    stack = []
    previous = None        # the block run before
    for line in lines:
        found = _INSN.match(line)
        if found:
            address = int(found.group(1), 16)
            size = len(found.group(2).replace(" ", "")) // 2
            if current is None:
                current = address
            last = (address, size, found.group(3), found.group(4))
            continue
        if line.startswith("IN:") or line.startswith("----"):
            if current is not None:
                blocks[current] = last
            current = None
            continue
        found = _TRACE.match(line)
        if not found:
            continue
        if current is not None:
            blocks[current] = last
            current = None
        pc = int(found.group(1), 16)
        if previous is not None:
            _step(stack, blocks.get(previous), pc)
        if pc == stop:
            return [(address & ~1, kind) for address, kind in reversed(stack)]
        previous = pc
    return None


def _step(stack, block, pc):
    """The shadow stack after leaving `block` for `pc`."""
    if block is None:
        return
    address, size, mnemonic, _ = block
    following = address + size
    if _is_call(mnemonic):
        if pc != following:
            stack.append((following, CALL))
        return
    if _DIRECT.match(mnemonic):
        return
    for depth in range(len(stack) - 1, -1, -1):
        if stack[depth][0] & ~1 == pc:
            del stack[depth:]
            return
    if mnemonic in ("svc", "swi") and pc != following:
        stack.append((following, SIGNAL))
