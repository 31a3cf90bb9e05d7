"""`set unwind claim`, the innermost physical frame, cores without the executable, two inferiors.

Oracles: GDB's own frames (the plugin's unwinder disabled, or GDB without
the plugin at all).
"""

import subprocess

import pytest

from gdb_actions import DECLINES, DISABLE, LEAVES_ALL, LOOK_AT_EACH, SIGNAL, claim_all, claimed, claimed_then_native, native_frames
from gdbrun import run_gdb
from sframe_demo import STRIP_CFI
from support import NO_EH, build, gdb_batch, need_tool, pcs_sps
from test_transcripts import inline_program

TABLES = "cfi,sframe,compact,exidx,pdata"      # the table sources only: no source reads code or the stack
NOEH = [["objcopy", *NO_EH, "{out}"]]


def test_default_auto_leaves_dwarf_frames_to_gdb():
    binary = build("chain.c", ["-O2"])
    results, _ = run_gdb(binary, [
        ("show", "cmd", "show unwind claim"),
        ("bt", "cmd", "bt"),
        claimed(),
        ("quiet", "py", LEAVES_ALL),
        ("unseen", "py", DECLINES),
        ("look", "cmd", LOOK_AT_EACH),
        ("bt_looked", "cmd", "bt"),
        ("why", "py", DECLINES),
        ("ours", "json", "unwind backtrace -json"),
        claim_all(),
        ("bt_all", "cmd", "bt"),
        claimed("claimed_all"),
        ("none", "cmd", "set unwind claim none"),
        ("bt_none", "cmd", "bt"),
        claimed("claimed_none"),
        ("bad", "cmd", "set unwind claim sometimes"),
    ], args=["qsort"], breakpoint="getpid")
    assert "auto" in results["show"]
    assert results["claimed"] == 0                       # every frame is in an .eh_frame FDE GDB reads
    # Every module is an objfile of GDB's with only .eh_frame, but the analysis may add frames in code
    # no FDE covers (_init, crtstuff's functions): each frame is looked at, and declined from its pc.
    assert results["quiet"] is False
    assert all("left to GDB" in reason for reason in results["unseen"]), results["unseen"]
    assert results["bt_looked"] == results["bt"]
    assert any("left to GDB" in reason and ".eh_frame FDE" in reason for reason in results["why"])
    # GDB's tail-call frame (DW_TAG_call_site in libc's debug info) survives.
    assert "__GI_qsort" in results["bt"] or "qsort" in results["bt"]
    # The unwind commands still show the plugin's own walk.
    assert [f["method"] for f in results["ours"]["frames"][1:4]] == ["cfi"] * 3
    assert results["claimed_all"] > 3
    assert results["claimed_none"] == results["claimed_all"]
    assert isinstance(results["bad"], dict) and "error" in results["bad"]


def test_auto_claims_frames_gdb_has_no_table_for():
    """Without .eh_frame, at -O2 without frame pointers GDB's prologue analyser is wrong: the
    analysis' frames are claimed by default. At -O0 it gives the very callers the analysis proves:
    they are left to GDB, with or without `set unwind guesses on` (old name: fallback)."""
    nofp = build("chain.c", ["-O2", "-fomit-frame-pointer"], name="chain-noeh-O2-nofp", post=NOEH)
    results, _ = run_gdb(nofp, [
        ("frames", "frames", None),
        claimed(),
        ("none", "cmd", "set unwind claim none"),
        claimed("before"),
        ("frames_none", "frames", None),
        claimed("after"),
        *native_frames(),
    ], args=["recurse", "30"])
    assert results["claimed"] >= 30
    assert [f["name"] for f in results["frames"][:33]] == ["stop_here"] + ["recurse"] * 31 + ["main"]
    assert len(results["native"]) < 5      # GDB alone: recurse's caller at 0 (its frame is 0x28 bytes)
    assert results["after"] == results["before"]
    binary = build("chain.c", ["-O0"], name="chain-noeh-O0", post=NOEH)
    results, _ = run_gdb(binary, [
        ("frames", "frames", None),
        ("why", "py", DECLINES),
        ("on", "cmd", "set unwind fallback on"),
        ("frames_on", "frames", None),
        claimed(),
        ("disable", "cmd", "disable unwinder global unwind-plugin"),
        ("native", "frames", None),
    ], args=["plain"])
    assert results["claimed"] == 0
    assert [f["name"] for f in results["frames"][:5]] == ["stop_here", "level3", "level2", "level1", "main"]
    assert pcs_sps(results["frames"]) == pcs_sps(results["frames_on"]) == pcs_sps(results["native"])
    assert any("heuristic gives this very caller" in reason for reason in results["why"]), results["why"]


@pytest.mark.parametrize("claim", ["auto", "all"])
def test_frame_0_in_inlined_code(claim):
    """GDB's level 0 is an inline frame; the first physical frame (level 1) uses its exact pc."""
    results, transcript = run_gdb(inline_program(), [
        ("claim", "cmd", "set unwind claim %s" % claim),
        ("all", "frames", {"include_all": True}),
        ("enabled", "frames", None),
        ("ours", "json", "unwind backtrace -json"),
        ("explain", "json", "unwind explain -json all"),
        *native_frames(),
    ], breakpoint="*outer")
    import gdb_kinds
    assert results["all"][0]["type"] == gdb_kinds.INLINE_FRAME, transcript
    native = results["native"]
    assert [f["name"] for f in native[:3]] == ["outer", "caller", "main"]
    assert pcs_sps(results["enabled"]) == pcs_sps(native)
    ours = results["ours"]["frames"]
    assert pcs_sps([{"pc": f["pc"], "sp": f["sp"]} for f in ours])[:len(native)] == pcs_sps(native)
    # The innermost physical frame is looked up at its own pc, not pc-1.
    assert results["explain"]["frames"][1]["evidence"]["lookup_pc"] == native[0]["pc"]


@pytest.mark.parametrize("mode,breakpoint", [("qsort", "getpid"), ("plain", "stop_here")])
def test_core_without_the_executable(tmp_path, mode, breakpoint, gdb_version):
    binary = build("chain.c", ["-O2"])
    core = tmp_path / "core"
    made = gdb_batch(["-ex", "break %s" % breakpoint, "-ex", "run %s" % mode, "-ex", "gcore %s" % core,
                       str(binary)], plugin=False)
    assert core.exists(), made.stdout + made.stderr
    commands = ["-c", str(core), "-ex", "bt", "-ex", "info frame", "-ex", "frame 1", "-ex", "info frame",
                "-ex", PHYSICAL_PCS]
    alone = gdb_batch(commands, plugin=False)
    loaded = gdb_batch(commands + ["-ex", "unwind backtrace", "-ex", "unwind modules"], plugin=True)
    assert "Fatal signal" not in loaded.stderr and loaded.returncode == 0, loaded.stderr[-2000:]
    assert "#1" in alone.stdout
    # GDB has no objfile for the executable or libc here; the plugin reads the files the core's mapping
    # list names (their build ids checked) and GDB's bt goes as far as GDB's own with the executable.
    with_exe = gdb_batch([str(binary)] + commands, plugin=False)
    truth = _bt_pcs(with_exe.stdout)
    # (GDB 16 reads the core's files itself and is right alone: there the plugin must lose nothing.)
    assert gdb_version == 16 or _bt_pcs(alone.stdout) != truth, alone.stdout
    assert _bt_pcs(loaded.stdout)[:len(truth)] == truth, (alone.stdout, loaded.stdout, with_exe.stdout)
    assert "[vdso]" in loaded.stdout            # GDB's in-memory objfile is located without a command
    # With the executable too: the plugin's bt is GDB's own.
    with_exe_loaded = gdb_batch([str(binary)] + commands + ["-ex", "set unwind claim all", "-ex", "bt"],
                                 plugin=True)
    assert with_exe_loaded.returncode == 0 and "Fatal signal" not in with_exe_loaded.stderr
    assert with_exe_loaded.stdout.startswith(with_exe.stdout)


# GDB's physical frames' pcs (no inline or tail-call frames: GDB builds those from debug information
# it has only with the executable and libc as objfiles), printed on one line.
PHYSICAL_PCS = ("python import itertools; print('PCS', [f.pc() for f in itertools.takewhile(bool, "
                "itertools.accumulate(itertools.repeat(None), lambda f, _: f.older(), initial=gdb.newest_frame())) "
                "if f.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME)])")


def _bt_pcs(text):
    """The pcs PHYSICAL_PCS printed."""
    return eval(text.split("PCS ", 1)[1].splitlines()[0])


def test_two_inferiors_keep_their_own_modules():
    first = build("chain.c", ["-O2"])
    second = build("chain.c", ["-O0"], name="chain-second")
    results, transcript = run_gdb(first, [
        ("mods1", "json", "unwind modules -json"),
        ("add", "cmd", "add-inferior -exec %s" % second),
        ("switch2", "cmd", "inferior 2"),
        ("run2", "cmd", "run plain"),
        ("mods2", "json", "unwind modules -json"),
        ("ours2", "json", "unwind backtrace -json"),
        ("switch1", "cmd", "inferior 1"),
        ("mods1b", "json", "unwind modules -json"),
        ("ours1", "json", "unwind backtrace -json"),
        *claimed_then_native("enabled1", native="native1"),
    ], args=["plain"])

    def names(key):
        return {m["name"] for m in results[key]["modules"]}

    assert first.name in names("mods1") and second.name not in names("mods1")
    assert second.name in names("mods2") and first.name not in names("mods2"), transcript
    assert first.name in names("mods1b") and second.name not in names("mods1b")
    ours1 = results["ours1"]
    assert ours1["stop_reason"] == "outermost", ours1
    native = results["native1"]
    assert [f["pc"] for f in ours1["frames"]][:len(native)] == [f["pc"] for f in native]
    assert [f["pc"] for f in results["enabled1"]] == [f["pc"] for f in native]


def test_vdso_is_left_to_gdb_which_loads_it_as_an_objfile():
    """GDB reads the vdso from memory as "system-supplied DSO at 0x..." and unwinds it from its
    .eh_frame: by default the plugin declines it; `claim all` takes it and agrees."""
    binary = build("chain.c", ["-O2"])
    steps = [("stop", "cmd", "break __vdso_clock_gettime"), ("go", "cmd", "continue"),
             ("objfiles", "py", "[o.filename for o in gdb.objfiles()]"),
             ("quiet_frames", "frames", None),
             ("quiet", "py", LEAVES_ALL),
             ("look", "cmd", LOOK_AT_EACH),
             ("auto", "frames", None),
             ("why", "py", DECLINES),
             claimed("claimed_auto"),
             *claimed_then_native("claim_all", count="claimed_all")]
    results, transcript = run_gdb(binary, steps, args=["vdso"], breakpoint="read_clock")
    assert any(name.startswith("system-supplied DSO at") for name in results["objfiles"])
    native = results["native"]
    assert "clock_gettime" in (native[0]["name"] or ""), transcript
    assert pcs_sps(results["auto"]) == pcs_sps(native)
    assert results["quiet"] is False and pcs_sps(results["quiet_frames"]) == pcs_sps(native)   # analysis is on
    assert results["claimed_auto"] == 0
    assert any("[vdso]" in reason for reason in results["why"]), results["why"]
    assert pcs_sps(results["claim_all"]) == pcs_sps(native)
    assert results["claimed_all"] > 0


def test_auto_remembers_the_frame_a_signal_interrupted():
    """GDB unwinds the trampoline (its FDE is in libc's .eh_frame); the plugin still notes that
    the frame above it was interrupted, so a frame it claims there is looked up at its exact pc."""
    binary = build("chain.c", ["-O2"])
    results, _ = run_gdb(binary, [
        ("look", "cmd", LOOK_AT_EACH),      # as where the plugin may add (by default it need not look)
        ("frames", "frames", None),
        ("after", "py", "sorted(gdb._unwind_plugin_state.after_signal)"),
        *native_frames(),
    ], args=["signal"], setup=SIGNAL)
    native = results["native"]
    assert pcs_sps(results["frames"]) == pcs_sps(native)
    trampoline = [f["name"] for f in native].index("__restore_rt")
    interrupted = native[trampoline + 1]
    assert [interrupted["pc"], interrupted["sp"]] in results["after"]


def test_run_twice_rereads_the_modules():
    """A second `run` maps the program elsewhere (ASLR on): the plugin follows GDB's new objfiles."""
    binary = build("chain.c", ["-O2"])
    results, transcript = run_gdb(binary, [
        ("first", "json", "unwind modules -json"),
        ("rerun", "cmd", "run plain"),
        ("second", "json", "unwind modules -json"),
        ("ours", "json", "unwind backtrace -json"),
        *claimed_then_native(),
    ], args=["plain"], setup=["set disable-randomization off"])

    def base(key):
        return next(m["base"] for m in results[key]["modules"] if m["name"] == binary.name)

    native = results["native"]
    assert [f["pc"] for f in results["ours"]["frames"]][:len(native)] == [f["pc"] for f in native], transcript
    assert pcs_sps(results["enabled"]) == pcs_sps(native)
    assert base("second") <= native[0]["pc"] < base("second") + 0x100000
    assert base("first") != base("second")          # ASLR moved it: the old map would be wrong


# the inferior's connection type; GDB 10 and 11 have no Inferior.connection: `info target` says it
CONNECTION = ("gdb.selected_inferior().connection.type if hasattr(gdb.selected_inferior(), 'connection') "
              "else 'remote' if 'Remote' in gdb.execute('info target', to_string=True) else 'native'")


def test_remote_target_without_proc_finds_modules_from_gdbs_objfiles():
    """gdbserver: no /proc for the plugin, libc read as "target:/lib/...". Modules are placed from
    GDB's objfiles without any GDB command; bt is GDB's own by default and under claim all."""
    import socket
    import time
    server = need_tool("gdbserver")
    binary = build("chain.c", ["-O2"])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([server, "127.0.0.1:%d" % port, str(binary), "plain"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        results, transcript = run_gdb(binary, [
            ("connection", "py", CONNECTION),
            ("auto", "frames", None),
            claimed("claimed_auto"),
            claim_all(),
            ("enabled", "frames", None),
            claimed("claimed_all"),
            ("modules", "json", "unwind modules -json"),
            ("ours", "json", "unwind backtrace -json"),
            *native_frames(),
        ], remote="127.0.0.1:%d" % port)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert results["connection"] == "remote"
    native = results["native"]
    assert pcs_sps(results["auto"]) == pcs_sps(native), transcript
    assert results["claimed_auto"] == 0
    assert pcs_sps(results["enabled"]) == pcs_sps(native)
    assert results["claimed_all"] >= len(native) - 1
    names = {m["name"] for m in results["modules"]["modules"]}
    assert {binary.name, "libc.so.6", "[vdso]"} <= names, names
    ours = results["ours"]
    assert ours["stop_reason"] == "outermost"
    assert [f["pc"] for f in ours["frames"]][:len(native)] == [f["pc"] for f in native]


GPRS = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
        "r14", "r15", "rip"]
# Every physical frame's general registers as GDB shows them, walked in one expression.
REGISTERS = ("(lambda walk: walk(walk, gdb.newest_frame(), []))(lambda w, f, acc: acc if f is None else "
             "w(w, f.older(), acc + ([] if f.type() in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME) else "
             "[[f.name()] + [str(f.read_register(r)) for r in %r]])))" % GPRS)


@pytest.mark.parametrize("flags", [["-O0"], ["-O2"], ["-O2", "-fomit-frame-pointer"]], ids=["O0", "O2", "O2-nofp"])
@pytest.mark.parametrize("mode", ["plain", "recurse", "alloca", "realign"])
def test_claim_all_gives_every_register_gdb_gives(mode, flags):
    """Claimed frames follow GDB's rule for registers a row does not mention (same value), and the
    values carried from one claimed frame to the next equal GDB's own, at every frame."""
    binary = build("chain.c", flags)
    args = {"recurse": ["recurse", "6"], "alloca": ["alloca", "40"], "realign": ["realign", "24"]}.get(mode, [mode])
    results, transcript = run_gdb(binary, [
        claim_all(),
        ("claimed", "py", REGISTERS),
        claimed("count"),
        ("disable", "cmd", DISABLE),
        ("native", "py", REGISTERS),
    ], args=args)
    native, from_plugin = results["native"], results["claimed"]
    assert len(native) >= 3 and results["count"] >= len(native) - 1, transcript
    assert from_plugin == native


def test_leaving_every_frame_to_gdb_is_decided_per_inferior_and_per_setting():
    """With table sources only, an inferior whose every module is an objfile of GDB's with only
    .eh_frame has its frames declined unseen; one with SFrame-only code (.eh_frame removed) is
    looked at and claimed there. Switching inferiors, a source that reads code (analysis, on by
    default) and trap handler names decide again."""
    plain = build("chain.c", ["-O2"])
    sframe_only = build("chain.c", ["-O0", "-Wa,--gsframe"], name="chain-sframe-only",
                        post=[["objcopy", *STRIP_CFI, "{out}"]])
    frames_and_flag = [("frames", "frames", None), ("quiet", "py", LEAVES_ALL), claimed()]

    def step(suffix, *extra):
        return [*extra, *[(name + suffix, kind, payload) for name, kind, payload in frames_and_flag]]

    results, transcript = run_gdb(plain, [
        ("tables", "cmd", "set unwind sources " + TABLES),
        *step("1"),
        ("add", "cmd", "add-inferior -exec %s" % sframe_only),
        ("switch2", "cmd", "inferior 2"),
        ("run2", "cmd", "run plain"),
        *step("2"),
        *step("1b", ("switch1", "cmd", "inferior 1")),
        *step("fallback", ("on", "cmd", "set unwind sources %s,analysis" % TABLES)),
        *step("off", ("off", "cmd", "set unwind sources " + TABLES)),
        *step("trap", ("trap", "cmd", "set unwind trap-handler-names no_such_handler")),
        ("notrap", "cmd", "set unwind trap-handler-names"),
        *native_frames(),
    ], args=["plain"])
    native = results["native"]
    assert results["quiet1"] is True and results["claimed1"] == 0, transcript
    assert pcs_sps(results["frames1"]) == pcs_sps(native)
    assert results["quiet2"] is False and results["claimed2"] >= 3, transcript     # SFrame-only frames
    assert [f["name"] for f in results["frames2"][:5]] == ["stop_here", "level3", "level2", "level1", "main"]
    assert results["quiet1b"] is True and results["claimed1b"] == results["claimed2"]
    assert results["quietfallback"] is False and results["quietoff"] is True
    assert results["quiettrap"] is False
    for key in ("frames1b", "framesfallback", "framesoff", "framestrap"):
        assert pcs_sps(results[key]) == pcs_sps(native), key


def test_explain_says_gdb_found_a_caller_itself_where_every_frame_is_left_to_it():
    """Tables removed from the program (-O0): GDB's bt finds the callers by its own prologue
    analyser, the very callers the plugin's analysis proves; explain says the unwinder declined
    and why. With the analysis off, the frame-pointer guess is declined as guesses are off."""
    binary = build("chain.c", ["-O0"], name="chain-noeh-O0", post=NOEH)
    results, transcript = run_gdb(binary, [
        ("explain", "cmd", "unwind explain 1"),
        ("quiet", "py", LEAVES_ALL),
        ("guessing", "cmd", "set unwind sources %s,frame-pointer,scan" % TABLES),
        ("explain_guess", "cmd", "unwind explain 1"),
    ], args=["plain"])
    assert results["quiet"] is False, transcript
    assert ("GDB's bt: the plugin declined this frame, so GDB's own unwinders found its caller: "
            "the debugger's own heuristic gives this very caller") in results["explain"], results["explain"]
    assert ("GDB's bt: the plugin declined this frame, so GDB's own unwinders found its caller: "
            "guesses are off (set unwind guesses on)") in results["explain_guess"], results["explain_guess"]


def test_the_state_does_not_hold_the_unwinder_and_a_setting_reaches_it_by_the_epoch():
    """The unwinder holds the state; the state holds no strong reference back (a weak one for the
    commands), and a setting change only moves the state's epoch: the unwinder drops its decisions
    at its next call. GDB's bt is unchanged across the switch."""
    binary = build("chain.c", ["-O2"])
    probe = ("(lambda s, u: [s.unwinder is u, any(v is u for v in vars(s).values()), s.epoch, u._epoch])("
             "gdb._unwind_plugin_state, next(x for x in gdb.frame_unwinders if x.name == 'unwind-plugin'))")
    results, transcript = run_gdb(binary, [
        ("bt1", "cmd", "bt"),
        ("before", "py", probe),
        ("tables", "cmd", "set unwind sources " + TABLES),
        ("set", "py", probe),
        ("bt2", "cmd", "bt"),
        ("after", "py", probe),
        ("quiet", "py", LEAVES_ALL),
    ], args=["plain"])
    found, strong, epoch, seen = results["before"]
    assert found is True and strong is False, transcript[-2000:]
    assert seen == epoch
    _, _, moved, not_yet = results["set"]
    assert moved > epoch and not_yet == epoch        # the setting moved the epoch, nothing more
    _, _, now, seen = results["after"]
    assert seen == now                               # the unwinder caught up at its next call
    assert results["quiet"] is True                  # and decided again: tables only leaves all to GDB
    assert results["bt2"] == results["bt1"]
