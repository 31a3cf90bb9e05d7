"""Compact unwind rules checked against real execution, in the Unicorn emulator.

The x86_64 and arm64 builds of tests/fixtures/macho/unwind_shapes.c are
loaded at a slide into Unicorn and run from shapes_main(depth) until
stop_here() is entered, deep in recurse -> chain1 -> chain2 -> chain3. A code
hook keeps a shadow stack of the true (return address, caller's sp) of every
active call. Then the stack is unwound with nothing but the compact rules
(lookup at pc-1 for callers, to_row, STACK_IND sizes read from the mapped
code) and must give exactly that chain, frame by frame.

The innermost frame is stopped at stop_here's first instruction, where the
ABI's entry rule holds (compact rules describe function bodies); every
caller is stopped at a call site, inside its body, where compact unwind is
exact. The arm64 -fomit-frame-pointer builds are left out: their callers
are DWARF-mode entries, which this module does not evaluate.

Needs the `unicorn` Python package (a test dependency in pyproject.toml).
"""

import struct

import pytest

from compact_support import FLAGS, SOURCE, build_macho, symbols, unwind_info_of
from macho_emulator import (ARM64_REGS, ARM64_RET, LOAD_ADDRESS, SENTINEL, X86_REGS, call_from_fresh_stack, load_image,
                            return_at_entry)

import unicorn  # noqa: E402  (a test dependency: missing means the set-up was not run)

DEPTH = 4

BUILDS = [("x86_64", f) for f in FLAGS] + [("arm64", "O2-fp"), ("arm64", "O0")]


def _run_to_stop_here(uc, macho, arch, path):
    """Run shapes_main(DEPTH) to stop_here's entry; return the true chain
    [(function, return address, caller's sp)], innermost last."""
    functions = {address + macho.slide: name for name, address in symbols(path).items()}
    stop = next(a for a, n in functions.items() if n == "stop_here")
    start = next(a for a, n in functions.items() if n == "shapes_main")
    call_from_fresh_stack(uc, arch, DEPTH)
    shadow = []

    def on_code(uc, address, size, _):
        if address in functions:
            frame = (functions[address], *return_at_entry(uc, arch))
            if shadow and shadow[-1][1:] == frame[1:]:
                shadow[-1] = frame          # a tail call replaces its caller's frame
            else:
                shadow.append(frame)
            if address == stop:
                uc.emu_stop()
                return
        code = bytes(uc.mem_read(address, size))
        if code == b"\xc3" or code == ARM64_RET:
            shadow.pop()

    uc.hook_add(unicorn.UC_HOOK_CODE, on_code, begin=LOAD_ADDRESS,
                end=LOAD_ADDRESS + 0x100000)
    uc.emu_start(start, SENTINEL, count=5_000_000)
    assert shadow and shadow[-1][0] == "stop_here", shadow
    return shadow


def _unwind(uc, macho, arch):
    """[(return address, caller's sp)] from stop_here's entry, by compact rules only."""
    regs_map = X86_REGS if arch == "x86_64" else ARM64_REGS
    regs = {n: uc.reg_read(r) for n, r in regs_map.items()}
    a = macho.arch
    pc_reg = 16 if arch == "x86_64" else 32

    def read(address):
        return struct.unpack("<Q", uc.mem_read(address, 8))[0]

    # Innermost frame, at its entry: the ABI's rule.
    if arch == "x86_64":
        regs[pc_reg] = read(regs[a.sp])
        regs[a.sp] += 8
    else:
        regs[pc_reg] = regs[30]
    chain = [(regs[pc_reg], regs[a.sp])]
    ui = unwind_info_of(macho)
    while regs[pc_reg] != SENTINEL and len(chain) < 64:
        entry = ui.lookup(regs[pc_reg] - 1)       # a return address is after the call
        assert entry is not None, hex(regs[pc_reg])
        row = ui.row(entry, read_code=macho.read_code)
        assert row is not None, ui.decode(entry).text
        cfa = regs[row.cfa.register] + row.cfa.offset
        caller = dict(regs)
        for number, rule in row.registers.items():
            if rule.kind == "offset":
                caller[number] = read(cfa + rule.offset)
            else:
                assert rule.kind == "same"
        caller[a.sp] = cfa
        caller[pc_reg] = caller[a.ra]
        regs = caller
        chain.append((regs[pc_reg], regs[a.sp]))
    return chain


@pytest.mark.parametrize("arch,flags", BUILDS)
def test_compact_rules_recover_the_emulated_call_chain(arch, flags):
    path, _ = build_macho(SOURCE, arch, FLAGS[flags])
    uc, macho = load_image(path, arch)
    truth = _run_to_stop_here(uc, macho, arch, path)
    names = [name for name, _, _ in truth]
    assert names[:2] == ["shapes_main", "recurse"] and names[-4:] == [
        "chain1", "chain2", "chain3", "stop_here"]
    assert names.count("recurse") == DEPTH + 1
    expected = [(ra, sp) for _, ra, sp in reversed(truth)]
    assert _unwind(uc, macho, arch) == expected
    # the chain passed through the modes this build has
    ui = unwind_info_of(macho)
    modes = {ui.decode(ui.lookup(ra - 1)).mode for ra, _ in expected[:-1]}
    if arch == "x86_64" and "nofp" in flags:
        assert "STACK_IND" in modes and "STACK_IMMD" in modes
    elif arch == "x86_64":
        assert modes == {"RBP_FRAME"}
    else:
        assert modes == {"FRAME"}
