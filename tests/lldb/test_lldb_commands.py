"""The plugin inside the real LLDB 16, checked against LLDB's own unwinder.

Oracle: LLDB's own frames (`thread backtrace` and the SBThread frames) on
the fixture programs GDB's tests use, built at test time, and the offline
`python -m plugin tables` for table dumps of files with no process.
Sessions are scripted (/usr/bin/python3 with `import lldb`, tests/helpers/lldb_driver.py)
or batch (`lldb-16 --batch`); no transcript may contain a Python traceback.

How LLDB's frames are compared: LLDB 16 lists inlined calls as frames of
their own and gives the concrete frame that holds them the pc of the inlined
call site, not the real one; and it adds artificial frames for tail calls
(from DW_TAG_call_site). Neither is on the stack, so both are folded into
physical frames (the pc of the group's first frame) before comparing, the
same rule lldb_commands/native.py uses and GDB's tests apply to GDB's
INLINE and TAILCALL frames. Both unwinders go on past main to _start, so
LLDB's physical frames must be a prefix of the plugin's (in practice, all of
them).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from chain_scenarios import BUILDS, LLDB_SCENARIOS, LLDB_SIGNAL
from lldbrun import physical_levels, batch_json, batch_outputs, lldb_argv, lldb_env, physical, run_batch, run_lldb, version
from support import ROOT, assert_cfi_walk_matches, build, corrupted_return_row, pcs, system_library

STEPS = [
    ("ours", "json", "unwind backtrace --json --sources cfi"),
    ("compare", "json", "unwind compare --json --sources cfi"),
    ("bt", "cmd", "thread backtrace"),
    ("frames", "frames", None),
]

_FRAME_LINE = re.compile(r"^\s*\*?\s*frame #(\d+): (0x[0-9a-fA-F]+) (.*)$")


def backtrace_pcs(text):
    """Physical pcs from LLDB's `thread backtrace` text (see the module docstring)."""
    pcs, group = [], None
    for line in text.splitlines():
        match = _FRAME_LINE.match(line)
        if not match:
            continue
        pc, rest = int(match.group(2), 16), match.group(3)
        if rest.rstrip().endswith("[artificial]"):
            continue
        # LLDB 16 and 19: "libc.so.6`caller [inlined] callee(...)"; 22: "... at msort.c:44:6 [inlined]".
        if " [inlined] " in rest or rest.rstrip().endswith("[inlined]"):
            group = pc if group is None else group
            continue
        pcs.append(pc if group is None else group)
        group = None
    return pcs


@pytest.mark.parametrize("flags", sorted(BUILDS))
@pytest.mark.parametrize("scenario", sorted(LLDB_SCENARIOS))
def test_backtrace_matches_lldb(scenario, flags):
    argv, breakpoint, setup, after = LLDB_SCENARIOS[scenario]
    binary = build("chain.c", BUILDS[flags])
    results, transcript = run_lldb(binary, after + STEPS, args=argv, breakpoint=breakpoint, setup=setup)
    for name, _, _ in after:
        assert results[name]["ok"], (name, results[name])
    lldb_pcs = backtrace_pcs(results["bt"]["output"])
    lldb_frames = physical(results["frames"])
    assert len(lldb_pcs) >= 4, transcript
    assert pcs(lldb_frames) == lldb_pcs            # the text and the SB API tell the same story
    assert_cfi_walk_matches(results["ours"], lldb_frames)
    ours = results["ours"]["frames"]
    # Levels are LLDB's frame numbers: inline frames before a physical frame and artificial
    # (tail-call) frames after it are counted, as LLDB's `bt` numbers them.
    levels = [f["level"] for f in ours]
    assert levels[:len(lldb_frames)] == physical_levels(results["frames"])[:len(ours)]
    assert all(a < b for a, b in zip(levels, levels[1:]))
    # `unwind compare` does the same comparison inside LLDB and sees no difference.
    compare = results["compare"]
    assert compare["agree"], compare["summary"]
    assert len(compare["frames"]) == len(ours)
    if scenario == "signal":
        names = [f["function"] for f in ours]
        trampoline = names.index("__restore_rt")
        assert ours[trampoline]["signal_frame"]
        assert lldb_frames[trampoline]["function"] == "__restore_rt"
    if scenario == "recurse":
        assert len(ours) > 1000
    if scenario == "thread":
        assert "start_thread" in [f["function"] for f in ours]
    if scenario == "vdso":          # the innermost frame is in a module that exists only in memory
        assert ours[0]["module"] == "[vdso]" and ours[0]["function"] == "__vdso_clock_gettime"
    if scenario == "plt":
        assert ours[0]["function"] == "qsort" and ours[1]["function"] == "sort_some"


def test_signal_frame_explained_and_selected_frames():
    """Through __restore_rt, from the innermost frame and from a selected one (-O2)."""
    binary = build("chain.c", BUILDS["O2"])
    steps = [
        ("ours", "json", "unwind backtrace --json --sources cfi"),
        ("explain", "json", "unwind explain --json --sources cfi all"),
        ("frames", "frames", None),
        # the frame the signal interrupted: the one above the trampoline
        ("select", "py", "command('frame select %d' % ([f.GetFunctionName() for f in thread]"
                         ".index('__restore_rt') + 1))"),
        ("from_selected", "json", "unwind backtrace --json --sources cfi"),
        ("explain_selected", "json", "unwind explain --json"),
        ("limited", "json", "unwind backtrace -j -s cfi -c 3"),
        ("explain2", "json", "unwind explain --json 2"),
        ("explain_text", "cmd", "unwind explain 1"),
        ("modules", "json", "unwind modules --json"),
    ]
    results, _ = run_lldb(binary, steps, args=["signal"], setup=LLDB_SIGNAL)
    assert results["select"]["ok"], results["select"]
    frames = results["ours"]["frames"]
    names = [f["function"] for f in frames]
    trampoline = names.index("__restore_rt")
    explained = results["explain"]["frames"]
    # The interrupted frame's caller is looked up at the interrupted pc itself;
    # the innermost pc is exact; ordinary return addresses are looked up at pc-1.
    assert explained[trampoline + 2]["evidence"]["lookup_pc"] == frames[trampoline + 1]["pc"]
    assert explained[1]["evidence"]["lookup_pc"] == frames[0]["pc"]
    assert explained[2]["evidence"]["lookup_pc"] == frames[1]["pc"] - 1
    assert "raise_signal" in names[trampoline:]
    # Every frame carries LLDB's verdict, and LLDB agrees everywhere.
    assert all(f["native"]["agrees"] for f in explained), [f["native"] for f in explained]
    # From the selected (interrupted) frame: the same frames as from the innermost one.
    selected = results["from_selected"]["frames"]
    assert selected[0]["level"] == trampoline + 1
    assert pcs(selected) == pcs(frames[trampoline + 1:])
    assert [f["sp"] for f in selected] == [f["sp"] for f in frames[trampoline + 1:]]
    assert [f["level"] for f in results["explain_selected"]["frames"]] == [trampoline + 1]
    # -c N: the walk stops after N frames, and says so.
    limited = results["limited"]
    assert len(limited["frames"]) == 3 and limited["stop_reason"] == "limit"
    assert pcs(limited["frames"]) == pcs(frames[trampoline + 1:trampoline + 4])
    assert [f["level"] for f in results["explain2"]["frames"]] == [2]
    text = results["explain_text"]["output"]
    assert "__restore_rt" in text and "verdict: the debugger's own unwinder agrees" in text
    # The vdso is a module that exists only in memory: found, with its tables, and no path.
    modules = {m["name"]: m for m in results["modules"]["modules"]}
    assert modules["[vdso]"]["path"] is None
    assert ".eh_frame_hdr" in modules["[vdso]"]["tables"]
    assert binary.name in modules and "libc.so.6" in modules


def test_compare_reports_a_corrupted_return_address():
    """Overwrite level2's saved return address with 0x1234 (-O0, so it is at [rbp+8]).

    LLDB 16 computes its frames once per stop and does not recompute them
    after `memory write`, so right after the write LLDB still lists level1
    and main while the plugin, which reads the stack afresh, stops at
    level2: the disagreement `unwind compare` must report. Once LLDB's frames
    are thrown away (writing a register does that), LLDB's own unwinder
    refuses 0x1234 as well, because it is not in executable memory: the
    plugin was right, and the two agree again.
    """
    binary = build("chain.c", BUILDS["O0"])
    steps = [
        ("ok", "json", "unwind compare --json --sources cfi"),
        ("poke", "py", "command('memory write --size 8 0x%x 0x1234' % "
                       "(thread.GetFrameAtIndex(2).FindRegister('rbp').GetValueAsUnsigned() + 8))"),
        ("bad", "json", "unwind compare --json --sources cfi"),
        ("bad_text", "cmd", "unwind compare --sources cfi"),
        ("flush", "py", "command('register write rip 0x%x' % thread.GetFrameAtIndex(0).GetPC())"),
        ("bt", "cmd", "thread backtrace"),
        ("after", "json", "unwind compare --json --sources cfi"),
    ]
    results, transcript = run_lldb(binary, steps, args=["plain"])
    assert results["poke"]["ok"], results["poke"]
    first = corrupted_return_row(results["ok"], results["bad"])
    assert first["native"]["function"] == "level1"
    assert first["verdict"] == "only the debugger has this frame"
    assert "!=" in results["bad_text"]["output"] and "disagree" in results["bad_text"]["output"]
    # LLDB, unwinding afresh, stops at level2 too.
    assert results["flush"]["ok"], results["flush"]
    assert [f.split("`")[1].split("(")[0] for f in re.findall(r"frame #\d+: \S+ (\S+)", results["bt"]["output"])] \
        == ["stop_here", "level3", "level2"], transcript
    assert results["after"]["agree"], results["after"]["summary"]
    assert results["after"]["stop_reason"] == "return-address-not-code"


# Bad arguments: each must be one LLDB error line naming the command, never a traceback.
BAD_LIVE = [
    ("unwind backtrace --bogus", "unrecognized arguments: --bogus"),
    ("unwind backtrace -c 0", "expected a positive number"),
    ("unwind backtrace -c", "expected one argument"),
    ("unwind backtrace 5 6", "expected a frame count"),
    ("unwind backtrace --sources cfi,cfi", "named twice"),
    ("unwind backtrace --sources nosuch", "unknown source 'nosuch'"),
    ("unwind backtrace 'unbalanced", "cannot split"),
    ("unwind explain 999", "no frame at level 999"),
    ("unwind explain -1", "LEVEL must be a frame number"),
    ("unwind explain abc", "LEVEL must be a frame number"),
    ("unwind explain 1 2", "expected one LEVEL"),
    ("unwind tables", "give an ADDRESS or FUNCTION"),
    ("unwind tables no_such_function_anywhere", "cannot evaluate 'no_such_function_anywhere'"),
    ("unwind tables 0xZZ", "cannot evaluate '0xZZ'"),
    ("unwind tables -- -5", "is not an address"),
    ("unwind tables --all main", "not both"),
    ("unwind compare extra", "unexpected argument"),
    ("unwind modules --json extra", "unexpected argument"),
]


# LLDB 19 and 22 parse the options of the plugin's (parsed) commands themselves,
# as they do their own commands': these errors are LLDB's, without the command's name.
# LLDB's own splitter also takes an unbalanced quote as a word.
PARSED_BY_LLDB = {
    "unwind backtrace --bogus": "error: unknown or ambiguous option",
    "unwind backtrace -c": "error: last option requires an argument",
    "unwind explain -1": "error: unknown or ambiguous option",
    "unwind backtrace 'unbalanced": "error: unwind backtrace: expected a frame count N (innermost N) or -N "
                                    "(outermost N), got 'unbalanced'",
    "unwind compare extra": "error: 'compare' doesn't take any arguments.",
    "unwind modules --json extra": "error: 'modules' doesn't take any arguments.",
}


def test_bad_arguments_are_lldb_errors():
    binary = build("chain.c", BUILDS["O2"])
    steps = [("bad%d" % i, "cmd", line) for i, (line, _) in enumerate(BAD_LIVE)]
    steps.append(("still_works", "json", "unwind backtrace --json -c 2"))
    results, _ = run_lldb(binary, steps, args=["plain"])
    for i, (line, expected) in enumerate(BAD_LIVE):
        out = results["bad%d" % i]
        name = " ".join(line.split()[:2])
        assert not out["ok"], line
        if version() >= 19 and line in PARSED_BY_LLDB:
            assert out["error"] == PARSED_BY_LLDB[line] + "\n", (line, out["error"])
            continue
        assert out["error"].startswith("error: %s: " % name), (line, out["error"])
        assert expected in out["error"], (line, out["error"])
        assert out["error"].count("\n") == 1, (line, out["error"])
        assert out["output"] == ""
    assert len(results["still_works"]["frames"]) == 2


def _offline(path, address=None):
    """`python -m plugin tables FILE --json [--address A]` (the interpreter running the tests has pyelftools)."""
    argv = [sys.executable, "-m", "plugin", "tables", str(path), "--json"]
    if address is not None:
        argv += ["--address", hex(address)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _function_address(path, name):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        for section_name in (".symtab", ".dynsym"):
            section = elf.get_section_by_name(section_name)
            for symbol in section.get_symbol_by_name(name) or () if section else ():
                if symbol["st_value"]:
                    return symbol["st_value"]
    raise AssertionError("%s has no symbol %s" % (path, name))


@pytest.mark.parametrize("flags", ["O0", "O2", "O2-sframe"])
def test_static_tables_match_offline(flags):
    """`unwind tables` with no process (file addresses) against `python -m plugin tables`.

    O2-sframe adds a .sframe section, so both table sources are read through
    SBTarget.ReadMemory on file addresses.
    """
    binary = build("chain.c", BUILDS[flags] if flags in BUILDS else ["-O2", "-Wa,--gsframe"])
    whole = _offline(binary)
    entries = next(s for s in whole["sources"] if s["kind"] == "cfi")["entries"]
    assert len(entries) > 10
    widest = max(entries, key=lambda e: len(e["rows"]))
    addresses = [entries[0]["start"], entries[-1]["end"] - 1, widest["rows"][-1]["address"] + 1,
                 _function_address(binary, "level2"), 0]          # 0: the ELF header, no FDE
    steps = [("at%d" % i, "json", "unwind tables --json 0x%x" % a) for i, a in enumerate(addresses)]
    steps += [("all", "json", "unwind tables --all --json"),
              ("by_name", "json", "unwind tables --json level2"),
              ("by_name_plus", "json", "unwind tables --json level2+1"),
              ("modules", "json", "unwind modules --json"),
              ("text", "cmd", "unwind tables stop_here"),
              ("no_process", "cmd", "unwind backtrace"),
              ("no_register", "cmd", "unwind tables $pc")]
    results, _ = run_lldb(binary, steps, launch=False)
    assert results["all"] == whole
    if flags == "O2-sframe":
        assert {s["kind"] for s in whole["sources"]} == {"cfi", "sframe"}
    for i, address in enumerate(addresses):
        assert results["at%d" % i] == _offline(binary, address), hex(address)
    assert results["by_name"] == results["at3"]
    assert results["by_name_plus"] == _offline(binary, addresses[3] + 1)
    assert results["at4"]["sources"] == [] and results["at4"]["problems"] == []
    module = results["modules"]["modules"][0]
    assert module["name"] == binary.name and module["base"] == 0      # a PIE: file addresses
    assert ".eh_frame_hdr" in module["tables"]
    assert results["text"]["ok"] and "CFA=rsp+8" in results["text"]["output"]
    assert results["no_process"]["error"].startswith("error: unwind backtrace: the program is not running")
    assert "registers need a stopped process" in results["no_register"]["error"]


def test_static_tables_of_a_shared_library():
    """`lldb-16 libc.so.6`: a library with no process, by address and by name."""
    libc = system_library("libc.so.6")
    qsort = _function_address(libc, "qsort")
    steps = [("by_address", "json", "unwind tables --json 0x%x" % qsort),
             ("by_name", "json", "unwind tables --json qsort"),
             ("inside", "json", "unwind tables --json 0x%x" % (qsort + 5))]
    results, _ = run_lldb(libc, steps, launch=False)
    assert results["by_address"]["sources"], results["by_address"]
    assert results["by_address"] == _offline(libc, qsort)
    assert results["by_name"] == results["by_address"]
    assert results["inside"] == _offline(libc, qsort + 5)


def test_batch_session():
    """`lldb-16 --batch`: load (twice: re-importing is harmless), help, walk, compare, then an error.

    Batch mode stops at the first failing command and exits 1, so the bad
    command comes last.
    """
    binary = build("chain.c", BUILDS["O2"])
    commands = [
        "command script import %s/lldb_commands" % ROOT,
        "help unwind",
        "help unwind backtrace",
        "help unwind explain",
        "help unwind tables",
        "help unwind compare",
        "help unwind modules",
        "breakpoint set --name stop_here",
        "run plain",
        "thread backtrace",
        "unwind backtrace",
        "unwind backtrace --json --sources cfi",
        "unwind compare -s cfi",
        "unwind explain --json 99",
    ]
    status, transcript = run_batch(binary, commands)
    assert status == 1, transcript
    outputs = dict(batch_outputs(transcript))
    assert "unwind plugin: not loaded" not in transcript
    for name in ("backtrace", "explain", "tables", "compare", "modules"):
        assert re.search(r"^\s+%s\s+-- " % name, outputs["help unwind"], re.M), outputs["help unwind"]
        if version() >= 19:     # parsed commands: LLDB writes the syntax line
            assert "Syntax: %s <cmd-options>" % name in outputs["help unwind %s" % name]
        else:
            assert "Usage: unwind %s" % name in outputs["help unwind %s" % name]
    assert "--sources" in outputs["help unwind backtrace"]
    lldb_pcs = backtrace_pcs(outputs["thread backtrace"])
    ours = batch_json(transcript, "unwind backtrace --json --sources cfi")
    assert pcs(ours["frames"])[:len(lldb_pcs)] == lldb_pcs
    text_pcs = [int(m, 16) for m in re.findall(r"^#\d+\s+(0x[0-9a-f]+) in ", outputs["unwind backtrace"], re.M)]
    assert text_pcs[:len(lldb_pcs)] == lldb_pcs
    assert "[found by: .eh_frame CFI]" in outputs["unwind backtrace"]
    assert "all %d frames agree" % len(ours["frames"]) in outputs["unwind compare -s cfi"]
    last = transcript.rstrip().splitlines()[-1]
    assert last.startswith("error: unwind explain: no frame at level 99: "), transcript[-500:]


def test_missing_pyelftools_is_one_line(tmp_path):
    """A checkout where pyelftools cannot be found: one line, no commands, no traceback."""
    probe = subprocess.run(["/usr/bin/python3", "-c", "import elftools"], capture_output=True)
    checkout = tmp_path / "checkout"
    for name in ("plugin", "lldb_commands"):
        shutil.copytree(ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    # Only system directories on PATH: the python3 there is the one LLDB embeds.
    env_path = "/usr/bin:/bin"
    argv = lldb_argv() + ["--no-lldbinit", "--batch",
            "-o", "command script import %s/lldb_commands" % checkout, "-o", "help unwind"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env=dict(lldb_env(), PATH=env_path))
    transcript = proc.stdout + proc.stderr
    assert "Traceback" not in transcript
    if probe.returncode == 0:
        # This system's Python has pyelftools itself: the plugin must simply load.
        assert "unwind plugin: not loaded" not in transcript and proc.returncode == 0, transcript
        return
    lines = [line for line in transcript.splitlines() if "unwind plugin" in line]
    assert len(lines) == 1, transcript
    assert lines[0].startswith("unwind plugin: not loaded: pyelftools is missing for LLDB's Python 3.")
    assert "pip install pyelftools" in lines[0] and "apt-get install python3-pyelftools" in lines[0]
    assert "'unwind' is not a known command" in transcript       # nothing half-registered
