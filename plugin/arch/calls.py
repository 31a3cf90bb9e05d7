"""Is there a call instruction just before this address?

Used to judge return addresses: by `unwind compare` when two unwinders
disagree, and by the stack scanner. A return address is the address right
after a call, so the bytes that end there must decode as one.
"""


def call_before(read_memory, arch, address):
    """The call form that ends at `address` (e.g. "call rel32"), or None."""
    if arch.name in ("x86_64", "i386"):
        return _x86_call_before(read_memory, address)
    if arch.name == "aarch64":
        return _aarch64_call_before(read_memory, address)
    return None


def _read(read_memory, address, size):
    try:
        return read_memory(address, size)
    except Exception:       # unreadable memory simply means "no call here"
        return None


def _x86_call_before(read_memory, address):
    code = _read(read_memory, address - 7, 7)
    if code is None:
        return None
    if code[2] == 0xE8:                       # call rel32: e8 + 4 bytes
        return "call rel32"
    # call r/m (ff /2): modrm reg field == 2; total length 2..7 bytes
    for length in range(2, 8):
        start = 7 - length
        if code[start] != 0xFF:
            continue
        modrm = code[start + 1]
        if (modrm >> 3) & 7 != 2:
            continue
        if _modrm_length(code[start + 1:]) == length - 1:
            return "call r/m"
    # REX-prefixed indirect call: 41 ff d0..d7 (call r8-r15)
    if code[4] == 0x41 and code[5] == 0xFF and (code[6] >> 3) & 7 == 2 and code[6] >> 6 == 3:
        return "call r/m"
    return None


def _modrm_length(tail):
    """Bytes taken by a ModRM operand (ModRM, SIB, displacement) in 64-bit mode."""
    modrm = tail[0]
    mod, rm = modrm >> 6, modrm & 7
    if mod == 3:
        return 1
    length = 1
    if rm == 4:                               # SIB follows
        length += 1
        if mod == 0 and len(tail) > 1 and tail[1] & 7 == 5:
            return length + 4
    if mod == 0 and rm == 5:                  # rip-relative disp32
        return length + 4
    return length + {0: 0, 1: 1, 2: 4}[mod]


def _aarch64_call_before(read_memory, address):
    code = _read(read_memory, address - 4, 4)
    if code is None:
        return None
    word = int.from_bytes(code, "little")
    if word & 0xFC000000 == 0x94000000:
        return "bl"
    if word & 0xFFFFFC1F == 0xD63F0000:
        return "blr"
    if word & 0xFFFFF800 == 0xD63F0800:       # blraa/blrab (pointer-auth forms)
        return "blra"
    return None
