"""The `exidx` source live: ehabi.cpp built for 32-bit Arm, run under `qemu-arm -g PORT`, gdb-multiarch.

Oracle: GDB's own frames (the plugin's unwinder disabled), compared by
(pc, sp) with the plugin's walk `unwind backtrace -json -sources exidx`,
from the stop in each mode of the fixture, for Arm and Thumb-2 code at
-O0 and -O2, with and without frame pointers (static executables: qemu-user has no /proc for GDB, and the
static one is found from its entry point). GDB's bt ends at main (its
`backtrace past-main` is off); the plugin's walk goes on into glibc and
must agree on every frame GDB shows.

"throw" stops in a destructor run by a cleanup while an exception is in
flight (the frames above it are thrower's landing pad, catcher, main), and
"personality" stops in __gxx_personality_v0 itself, with libgcc's unwinder
(_Unwind_RaiseException and its helpers) and __cxa_throw on the stack.
"""

import pytest

from gdb_actions import DECLINES, DISABLE, claim_all, native_frames
from gdbrun import run_gdb
from qemu_arm import BUILDS, SYSROOT, arm_program, qemu_arm
from support import HELPERS, build, need_tool

MODES = ["plain", "alloca", "float", "varargs", "big", "throw"]


def _run(binary, mode, breakpoint="stop_here", sysroot=None):
    setup = ["set sysroot %s" % sysroot] if sysroot else []
    with qemu_arm(binary, [mode], sysroot=sysroot) as address:
        return run_gdb(binary, [
            ("arch", "py", "gdb.selected_frame().architecture().name()"),
            ("enabled", "frames", None),
            ("ours", "json", "unwind backtrace -json -sources exidx"),
            ("explain", "json", "unwind explain -json -sources exidx all"),
            *native_frames(),
        ], breakpoint=breakpoint, setup=setup, gdb_program="gdb-multiarch", remote=address, timeout=300)


def _pc_sp(frames):
    return [(f["pc"], f["sp"]) for f in frames]


def _check(results, transcript, last="main"):
    assert results["arch"].startswith("arm"), results["arch"]
    native = results["native"]
    names = [f["name"] for f in native]
    assert last in names, transcript
    ours = results["ours"]["frames"]
    assert _pc_sp(ours)[:len(native)] == _pc_sp(native), transcript
    assert all(f["method"] == "exidx" for f in ours[1:len(native)])
    # With the plugin's unwinder claiming frames, GDB's own bt is unchanged.
    assert _pc_sp(results["enabled"]) == _pc_sp(native)
    return ours, native


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_walk_equals_gdb(name, mode):
    results, transcript = _run(arm_program(BUILDS[name]), mode)
    ours, native = _check(results, transcript)
    assert native[0]["name"] == "stop_here"
    # Evidence: each frame names its index entry, where its opcodes are and what each did.
    for frame in results["explain"]["frames"][1:len(native)]:
        entry = frame["evidence"]["entry"]
        assert entry["kind"] in ("inline", "table") and entry["decoded"] is True
        assert entry["opcodes_at"] and entry["instructions"]
        assert all(i["effect"] for i in entry["instructions"])


@pytest.mark.parametrize("name", ["arm-O2", "thumb-O2"])
def test_walk_from_inside_the_personality_routine(name):
    """libgcc's ___Unwind_RaiseException (assembly) is EXIDX_CANTUNWIND: the exidx walk
    equals GDB's up to it and stops there saying so; GDB's bt with the plugin's unwinder
    (exidx frames claimed, that one left to GDB's prologue analysis) is GDB's own."""
    results, transcript = _run(arm_program(BUILDS[name]), "throw", breakpoint="__gxx_personality_v0")
    native = results["native"]
    names = [f["name"] for f in native]
    assert names[0] == "__gxx_personality_v0" and "__cxa_throw" in names and names[-1] == "main", transcript
    ours = results["ours"]
    stuck = names.index("___Unwind_RaiseException")
    assert _pc_sp(ours["frames"]) == _pc_sp(native[:stuck + 1])
    assert ours["stop_reason"] == "no-unwind-info" and "EXIDX_CANTUNWIND" in ours["stop_detail"]
    assert _pc_sp(results["enabled"]) == _pc_sp(native)


@pytest.mark.parametrize("name", ["arm-O0", "thumb-O2"])
def test_dynamic_walk_equals_gdb(name):
    """A dynamic executable: libc, libstdc++ and libgcc_s tables read from their images in
    memory; thrower and catcher name __gxx_personality_v0 through the PLT (`...@plt`)."""
    results, transcript = _run(arm_program(BUILDS[name], static=False), "throw", sysroot=SYSROOT)
    ours, native = _check(results, transcript)
    assert native[0]["name"] == "stop_here"
    modules = {f["module"] for f in ours}
    assert any(m and m.startswith("libc.so") for m in modules), transcript
    generic = [f["evidence"]["entry"] for f in results["explain"]["frames"][1:]
               if f["evidence"]["entry"]["model"] == "generic"]
    assert generic and all(e["decoded"] for e in generic)


def _without_debug_frame(name):
    """BUILDS[name] with .debug_frame removed: GDB's DWARF unwinder has nothing, its EHABI one .ARM.exidx."""
    need_tool("arm-linux-gnueabihf-objcopy")
    return build("ehabi.cpp", ["-funwind-tables", "-static", *BUILDS[name]], name="ehabi-arm-nodf",
                 compiler="arm-linux-gnueabihf-g++",
                 post=[["arm-linux-gnueabihf-objcopy", "--remove-section", ".debug_frame", "{out}"]])


@pytest.mark.parametrize("name", ["arm-O2", "thumb-O2"])
def test_call_sites_gdb_unwinds_by_ehabi_are_left_to_it(name):
    """Promise 1 under `set unwind claim auto`: at levels 1-3 GDB's own EHABI unwinder
    builds the frame (its callee is a normal frame, so .ARM.exidx holds there) and `info
    frame` lists where r4/r3 and lr were saved. With the plugin loaded it must print the
    same; a frame the plugin claimed would have no "Saved registers" (GDB 13's Python API
    hands back values), which `set unwind claim all` shows."""
    binary = _without_debug_frame(name)
    levels = (1, 2, 3)
    actions = [("auto%d" % n, "cmd", "frame %d\ninfo frame" % n) for n in levels]
    actions += [("declines", "py", DECLINES), claim_all()]
    actions += [("all%d" % n, "cmd", "frame %d\ninfo frame" % n) for n in levels]
    actions += [("disable", "cmd", DISABLE)]
    actions += [("gdb%d" % n, "cmd", "frame %d\ninfo frame" % n) for n in levels]
    with qemu_arm(binary, ["plain"]) as address:
        results, transcript = run_gdb(binary, actions, gdb_program="gdb-multiarch", remote=address,
                                      timeout=300)
    for n in levels:
        alone = results["gdb%d" % n]
        assert "Saved registers:" in alone and " lr at 0x" in alone, transcript
        assert results["auto%d" % n] == alone, transcript
        assert "Saved registers:" not in results["all%d" % n], transcript
    assert any("GDB's EHABI unwinder covers the call site" in r for r in results["declines"]), results["declines"]


@pytest.mark.parametrize("name", ["arm-O2", "thumb-O2"])
def test_cfi_walks_on_from_a_leaf_first_instruction(name):
    """stop_here is a leaf: its .debug_frame rows have no rule for lr, which keeps its value
    (GDB's rule for an unspecified register), so `-sources cfi` goes on from its first
    instruction; the Thumb bit of each return address is dropped from the caller's pc."""
    binary = arm_program(BUILDS[name])
    with qemu_arm(binary, ["plain"]) as address:
        results, transcript = run_gdb(binary, [
            ("ours", "json", "unwind explain -json -sources cfi all"),
            *native_frames(),
        ], gdb_program="gdb-multiarch", remote=address, timeout=300)
    native = results["native"]
    frames = results["ours"]["frames"]
    assert native[0]["name"] == "stop_here" and native[-1]["name"] == "main", transcript
    assert _pc_sp(frames)[:len(native)] == _pc_sp(native), transcript
    assert all(f["method"] == "cfi" for f in frames[1:len(native)])
    notes = frames[1]["evidence"]["notes"]
    assert any(n.startswith("the row has no rule for lr: it keeps its value") for n in notes), notes


STEPPED = {"level2": "plain", "with_alloca": "alloca", "with_floats": "float", "with_varargs": "varargs"}


def _stepped(binary, mode, function, sysroot=None):
    setup = ["set sysroot %s" % sysroot] if sysroot else []
    with qemu_arm(binary, [mode], sysroot=sysroot) as address:
        results, transcript = run_gdb(binary, [
            ("path", "py", "__import__('sys').path.insert(0, %r)" % str(HELPERS)),
            ("walk", "py", "__import__('ehabi_steps').walk()"),
        ], breakpoint="*" + function, setup=setup, gdb_program="gdb-multiarch", remote=address, timeout=300)
    return results["walk"], transcript


@pytest.mark.parametrize("function", sorted(STEPPED))
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_instruction_gives_the_right_caller_or_none(name, function):
    """The innermost frame stepped (nexti) from a function's first instruction to its return:
    the caller's pc and sp are known at entry (lr, sp), and at every pc the `exidx` walk must
    give exactly them or say it does not know (EHABI rows hold after the prologue and before
    the epilogue; the code around pc decides, plugin/arch/arm.py code_facts). Where the linker
    merged a function's index entry with its neighbour's, its start comes from its symbol."""
    walk, transcript = _stepped(arm_program(BUILDS[name]), STEPPED[function], function)
    _check_steps(walk, transcript)


@pytest.mark.parametrize("function", ["__cxa_allocate_exception", "__cxa_begin_catch"])
def test_every_instruction_of_debian_libstdcxx(function):
    """The same in Debian's armhf libstdc++ (Thumb-2 built by Debian), read from memory."""
    walk, transcript = _stepped(arm_program(BUILDS["thumb-O2"], static=False), "throw", function, SYSROOT)
    _check_steps(walk, transcript)
    assert len(walk["steps"]) >= 10


def _check_steps(walk, transcript):
    assert "error" not in walk and walk["returned"], (walk, transcript[-3000:])
    steps = walk["steps"]
    wrong = [(hex(s["pc"]), s["caller"]) for s in steps if s["caller"] not in (None, walk["truth"])]
    assert not wrong, (walk["truth"], wrong)
    unknown = [s for s in steps if s["caller"] is None]
    assert all(s["stop_reason"] == "no-unwind-info" and ("prologue" in s["stop_detail"] or
                                                         "epilogue" in s["stop_detail"]) for s in unknown), unknown
    assert steps[0]["caller"] == walk["truth"] and len(unknown) * 3 < len(steps), (len(unknown), len(steps))


def test_gdb_prints_the_same_in_debian_armhf_libraries():
    """Promise 1 on Debian's armhf libstdc++, libgcc_s and libc (under qemu-arm -L): stopped in
    __gxx_personality_v0 with an exception in flight, `bt` and `info frame` at every level
    print with the plugin loaded exactly what GDB alone prints."""
    binary = arm_program(BUILDS["thumb-O2"], static=False)
    levels = range(8)
    actions = [("auto_bt", "cmd", "bt")]
    actions += [("auto%d" % n, "cmd", "frame %d\ninfo frame" % n) for n in levels]
    actions += [("disable", "cmd", DISABLE), ("gdb_bt", "cmd", "bt")]
    actions += [("gdb%d" % n, "cmd", "frame %d\ninfo frame" % n) for n in levels]
    with qemu_arm(binary, ["throw"], sysroot=SYSROOT) as address:
        results, transcript = run_gdb(binary, actions, breakpoint="__gxx_personality_v0",
                                      setup=["set sysroot %s" % SYSROOT], gdb_program="gdb-multiarch",
                                      remote=address, timeout=300)
    assert "libgcc_s.so" in results["gdb_bt"] and "__cxa_throw" in results["gdb_bt"], transcript
    assert results["auto_bt"] == results["gdb_bt"]
    for n in levels:
        assert results["auto%d" % n] == results["gdb%d" % n], n
    assert sum("Saved registers:" in results["gdb%d" % n] for n in levels
               if isinstance(results["gdb%d" % n], str)) >= 6
