"""Debian's 6.1 and 6.12 kernels (two ORC layouts: by version string, by .orc_header)
under QEMU (TCG, nokaslr), stopped by GDB through the
gdbstub, its stack walked with the plugin's ORC rules (tests/helpers/orc_gdb_walk.py).

A first boot, without GDB, prints the kernel's symbols (/proc/kallsyms; addresses are fixed by
nokaslr). In the second, the initramfs's /init turns on ftrace's `function` tracer with
`func_stack_trace`, filtered to the functions the stops are at (or run below them): each call
of one records the kernel's own ORC unwinder's stack trace, printed to the serial console at
the end. GDB first stops at a marker (version_proc_show, `cat /proc/version`) and finishes it,
then (STOPS) at the next timer tick that interrupted the kernel (update_process_times), an
interrupt's first instruction, do_sys_openat2 (a syscall from user mode), a page fault's first
instruction and below it (handle_mm_fault), and panic (/init exits: "Attempted to kill init").
The guest has one CPU, so the trace's records are in the order the calls ran: each stop's truth
is the first record of its traced function after the previous stop's (an interrupt entry's: the
trace of handle_irq_event below it, from the entry on; a fault entry's: the page_fault_* event's
stacktrace trigger); the tick's is the one whose interrupted pc GDB read from its pt_regs
(_truths). At panic the truth is the kernel's printed trace.
Both the plugin's walk and GDB's own `bt` with the plugin loaded (and a symbol file made from
the kallsyms lines, `python -m plugin kallsyms`) must name those frames; `unwind modules`
lists the kernel with its ORC table; a loaded module (crc32c_generic) is walked by its own
table (test_a_loaded_modules_frames_come_from_its_own_orc_table).
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import every

KERNELS = Path(os.environ.get("UNWIND_KERNEL_ROOT", "/opt/unwind-kernel"))
# Debian 12's 6.1 (ORC layout of v4.14-v6.2, chosen by the version string) and the 6.12 of
# bookworm-backports (layout of v6.4 on, chosen by .orc_header)
RELEASES = {"6.1.0-50-amd64": "v4.14-v6.2 \\(chosen by the kernel version string\\)",
            "6.12.107+deb12-amd64": "v6.4\\+ \\(chosen by the .orc_header hash\\)"}
# The KASLR boot waits 60 s for the panic: 6.1's runs in CI, 6.12's with UNWIND_ORC_EVERY=1
KASLR_RELEASES = sorted(RELEASES) if every("UNWIND_ORC_EVERY") else ["6.1.0-50-amd64"]
REPO = Path(__file__).resolve().parents[2]
WALKER = REPO / "tests/helpers/orc_gdb_walk.py"
MARKER = "version_proc_show"
# Every page fault emits exceptions:page_fault_user or page_fault_kernel (exc_page_fault, before
# anything else runs); not every one reaches handle_mm_fault (a fault the uaccess fixup ends). Its
# stacktrace trigger is the fault entry's truth.
FAULT_EVENT = "page_fault"
# (name, function GDB stops at, function traced for its truth): in the order the kernel reaches them
STOPS = [("timer", "update_process_times", "update_process_times"),   # a tick's handler, below the interrupt
         ("irq entry", "asm_common_interrupt", "handle_irq_event"),    # an interrupt's first instruction
         ("syscall", "do_sys_openat2", "do_sys_openat2"),              # a syscall from user mode
         ("fault entry", "asm_exc_page_fault", FAULT_EVENT),           # a page fault's first instruction
         ("fault below", "handle_mm_fault", "handle_mm_fault"),        # below the page fault's pt_regs
         ("panic", "panic", None)]
# unwindsyms=1 on the command line (init's environment): print the symbols and exit. Else the
# ftrace window, in two phases. First the marker and the tick alone are traced, while the kernel
# formats kallsyms (no console output, so no device interrupts): a tick can then never land in
# ftrace's code (its handler runs with interrupts off), whose dynamic trampolines have no ORC entry
# of their own (the kernel's unwinder and the plugin map them to ftrace_caller's: tested apart, in
# test_a_walk_through_a_dynamic_ftrace_trampoline). Then the other
# stops' functions: console output (the serial port's interrupts), a syscall, a fork (page faults).
INIT = """#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
if [ -n "$unwindsyms" ]; then /bin/busybox cat /proc/kallsyms; echo KALLSYMS-DONE; exit 0; fi
/bin/busybox mount -t tracefs nodev /t
echo %s > /t/set_ftrace_filter
echo function > /t/current_tracer
echo 1 > /t/options/func_stack_trace
echo 1 > /t/options/sym-offset
/bin/busybox cat /proc/version > /dev/null
/bin/busybox head -c 300000 /proc/kallsyms > /dev/null
echo %s >> /t/set_ftrace_filter
echo stacktrace > /t/events/exceptions/page_fault_user/trigger
echo stacktrace > /t/events/exceptions/page_fault_kernel/trigger
echo 1 > /t/events/exceptions/enable
echo WINDOW
/bin/busybox cat /proc/version > /dev/null
/bin/busybox true
echo 0 > /t/tracing_on
echo TRACE-START
/bin/busybox cat /t/trace
echo TRACE-END
exit 0
""" % (MARKER + " update_process_times",
       " ".join(sorted({traced for _, _, traced in STOPS[1:] if traced not in (None, FAULT_EVENT)})))


def _tools(root):
    for tool in ("qemu-system-x86_64", "busybox", "gdb"):
        if shutil.which(tool) is None:
            pytest.fail("%s is missing: run `bash tests/setup.sh` (tests/setup_kernel.sh)" % tool)
    if not (root / "vmlinux").is_file():
        pytest.fail("%s is missing: run `bash tests/setup.sh`" % (root / "vmlinux"))


def _initrd(tmp, init=INIT, files=()):
    root = tmp / "root"
    for folder in ("bin", "proc", "t"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("busybox"), root / "bin/busybox")
    for path in files:
        shutil.copy(str(path), str(root / path.name))
    (root / "init").write_text(init)
    (root / "init").chmod(0o755)
    names = subprocess.run(["find", "."], cwd=str(root), capture_output=True, check=True).stdout
    archive = subprocess.run(["busybox", "cpio", "-o", "-H", "newc"], cwd=str(root), input=names,
                             capture_output=True, check=True).stdout
    (tmp / "initrd").write_bytes(archive)
    return tmp / "initrd"


def _qemu(root, initrd, serial, append, extra=(), monitor="none"):
    image = root / "deb/boot" / ("vmlinuz-" + root.name)
    return ["qemu-system-x86_64", "-m", "512", "-nographic", "-no-reboot", "-kernel", str(image),
            "-initrd", str(initrd), "-append", "console=ttyS0 rdinit=/init quiet " + append,
            "-serial", "file:%s" % serial, "-monitor", monitor, "-display", "none"] + list(extra)


def _first_boot(root, initrd, tmp):
    """The kallsyms lines of a boot without GDB (nokaslr): {name: address} of the text symbols, and the
    symbol file GDB is given (python -m plugin kallsyms; modules' lines too)."""
    first = tmp / "first.txt"
    subprocess.run(_qemu(root, initrd, first, "nokaslr panic=-1 unwindsyms=1"), capture_output=True, timeout=240)
    text = first.read_text(errors="replace").replace("\r", "")
    assert "KALLSYMS-DONE" in text and "Attempted to kill init" in text, text[-2000:]
    symbols = {}
    for address, name in re.findall(r"^([0-9a-f]{16}) [tT] (\S+)$", text, re.M):
        symbols.setdefault(name, int(address, 16))
    lines = re.findall(r"^[0-9a-f]{16} [A-Za-z] \S+(?:\t\[\S+\])?$", text, re.M)
    (tmp / "kallsyms").write_text("\n".join(lines) + "\n")
    subprocess.run([sys.executable, "-m", "plugin", "kallsyms", str(tmp / "kallsyms"), str(tmp / "kernel.elf")],
                   cwd=str(REPO), check=True, capture_output=True, timeout=120)
    return symbols, tmp / "kernel.elf", text


def _gdb_on_qemu(root, initrd, serial, symbol_file, commands, append="nokaslr panic=-1", monitor="none",
                 env=None, settle=0, gdb="gdb"):
    """Boot ROOT's kernel under QEMU held at its first instruction (-S), GDB attached through the gdbstub
    with the plugin loaded and SYMBOL_FILE given, then COMMANDS (GDB's -ex list); GDB is the program GDB. QEMU is given SETTLE
    seconds to end by itself (its serial file complete) once GDB is done, then killed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    qemu = subprocess.Popen(_qemu(root, initrd, serial, append, ["-gdb", "tcp:127.0.0.1:%d" % port, "-S"], monitor),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        prefix = ["set pagination off", "source %s" % (REPO / "gdb_unwinder/gdbinit.py"),
                  "symbol-file %s" % symbol_file, "target remote 127.0.0.1:%d" % port]
        argv = [gdb, "-nx", "-batch"] + [arg for command in prefix + commands for arg in ("-ex", command)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        if settle:
            qemu.wait(timeout=settle)
    finally:
        qemu.kill()
    return done


def _gdb_bt(text):
    """[(pc, name)] of each `bt` GDB printed between BT-START and BT-END markers ("do_exit[cold]"
    as the kernel spells it, "do_exit.cold")."""
    out = []
    for block in re.findall(r"BT-START\n(.*?)BT-END", text, re.S):
        frames = re.findall(r"^#\d+\s+(0x[0-9a-f]+) in (\S+) \(", block, re.M)
        out.append([(int(pc, 16), name.replace("[cold]", ".cold")) for pc, name in frames]
                   + [("??", line) for line in block.splitlines() if "??" in line])
    return out


def _name(pc, ordered, return_address):
    """symbol+offset as the kernel prints it (%pB): a return address is looked up at
    pc - 1 (a call to a noreturn function can end its function)."""
    import bisect
    i = bisect.bisect_right([a for a, _ in ordered], pc - return_address) - 1
    return "%s+0x%x" % (ordered[i][1], pc - ordered[i][0])


def _trace(serial):
    """ftrace's records between TRACE-START and TRACE-END: [(function, [frame names], [frames as printed])],
    the frames as the kernel's unwinder gave them from the traced function on (before it: ftrace's
    trampoline), printed with sym-offset ("do_sys_openat2+0x0/0x90")."""
    text = serial.split("TRACE-START\n", 1)[-1].split("TRACE-END", 1)[0]
    records = []
    for line in text.splitlines():
        called = re.search(r"\] \S+ +[0-9.]+: (\S+) <-\S+$", line)
        event = re.search(r"\] \S+ +[0-9.]+: (page_fault)_(user|kernel): ", line)
        if called or event:
            records.append(((called or event).group(1).split("+")[0], []))
        elif line.startswith(" => ") and records:
            records[-1][1].append(line[4:].strip().split("/")[0])
    kept = []
    for function, printed in records:
        names = [frame.split("+")[0] for frame in printed]
        if function == FAULT_EVENT and "asm_exc_page_fault" in names:
            kept.append((function, names, printed))
        elif function in names:
            at = names.index(function)
            kept.append((function, names[at:], printed[at:]))
    return kept


def _truths(records, tick):
    """Each stop's truths: [the frames of the first record of its traced function after the previous
    stop's record, from the stop's function on]. The marker's record is written after GDB's stop at
    its first instruction, and a tick pending then is taken there, before it: so the timer's truths
    are the ticks, from the record before the marker's on, whose interrupted pc (after the entry) is
    the one GDB read from the tick's pt_regs (`__irq_regs`), TICK (symbol+offset): several ticks
    may have interrupted that pc (one CI run matched an earlier one and failed)."""
    at = max([function for function, _, _ in records].index(MARKER) - 1, 0)
    truths = {}
    for name, function, traced in STOPS:
        for i in range(at, len(records) if traced else 0):
            names = records[i][1]
            if records[i][0] != traced:
                continue
            if name == "timer":
                candidates = [r[1] for r in records[i:] if r[0] == traced and _interrupted_at(r, tick)]
                if not _interrupted_at(records[i], tick):
                    continue
                # Ticks often interrupt the same pc (where interrupts are enabled again,
                # _raw_spin_unlock_irqrestore+N): each such record is a stack the kernel recorded there
                truths[name] = [c[c.index(function):] for c in candidates]
            else:
                truths[name] = [names[names.index(function):]]
            at = i
            break
    return truths


def _interrupted_at(record, tick) -> bool:
    """Did the tick of this record interrupt the pc TICK (symbol+offset), the frame after its entry?"""
    names, printed = record[1], record[2]
    entry = [n for n, frame in enumerate(names) if frame.startswith("asm_")][:1]
    return bool(entry) and printed[entry[0] + 1:entry[0] + 2] == [tick]


@pytest.fixture(scope="module", params=sorted(RELEASES))
def booted(request, tmp_path_factory):
    root = KERNELS / request.param
    _tools(root)
    tmp = tmp_path_factory.mktemp("qemu")
    initrd = _initrd(tmp)
    symbols, symbol_file, text = _first_boot(root, initrd, tmp)
    second = tmp / "second.txt"
    walk = ["python exec(open(%r).read())" % str(WALKER), "echo BT-START\\n", "bt", "echo BT-END\\n"]
    # `finish`: the marker's own ftrace call (its stack trace recorded) is over before GDB waits for a tick,
    # so no tick it stops at interrupted ftrace's code (its dynamic trampolines have no ORC entries: see docs)
    commands = ["hbreak *0x%x" % symbols[MARKER], "continue", "delete", "finish"]
    # the tick's pt_regs (per-cpu __irq_regs, at gs_base + its offset): the interrupted pc, read by GDB
    per_cpu = int(re.search(r"^([0-9a-f]{16}) A __irq_regs$", text, re.M).group(1), 16)
    tick_ip = ("python read = lambda a: int.from_bytes(bytes(gdb.selected_inferior().read_memory(a, 8)), 'little'); "
               "base = int(gdb.parse_and_eval('$gs_base')) & (1 << 64) - 1; "
               "print('TICK-IP 0x%%x' %% read(read(base + 0x%x) + 128))" % per_cpu)
    for name, function, _ in STOPS:
        condition = " if $rdi == 0" if name == "timer" else ""      # update_process_times(user_tick)
        commands += ["delete", "hbreak *0x%x%s" % (symbols[function], condition), "continue"] + walk
        if name == "timer":
            commands += ["unwind modules", tick_ip]
        if name == "irq entry":     # the interrupted frame's registers the iret frame does not hold, and #0's
            commands += ["echo IRQ-REGS\\n", "frame 1", "p/x $rbx", "p/x $r12", "frame 0", "p/x $rbx", "p/x $r12",
                         "echo IRQ-REGS-END\\n"]
    # GDB's bt without the plugin's frame filter: the error past the last frame (no Python unwinder can end a walk)
    commands += ["maint flush register-cache", "echo NO-FILTERS\\n", "bt -no-filters"]
    env = dict(os.environ, ORC_VMLINUX=str(root / "vmlinux"),
               ORC_SYS_PATH=":".join([str(REPO)] + [p for p in sys.path if "site-packages" in p]))
    gdb = _gdb_on_qemu(root, initrd, second, symbol_file, commands + ["unwind explain 1", "delete", "continue"],
                       env=env, settle=120)
    walks = [json.loads(line[len("ORC-WALK "):]) for line in gdb.stdout.splitlines()
             if line.startswith("ORC-WALK ")]
    assert len(walks) == len(STOPS), gdb.stdout[-3000:] + gdb.stderr[-3000:]
    ordered = sorted((a, n) for n, a in symbols.items())
    named = [[(_name(pc, ordered, n > 0 and w[n - 1][1] == "caller"), outcome, kind, sp_reg, sp)
              for n, (pc, outcome, kind, sp_reg, sp) in enumerate(w)] for w in walks]
    bts = _gdb_bt(gdb.stdout)
    assert len(bts) == len(STOPS), gdb.stdout[-3000:]
    names = [stop[0] for stop in STOPS]
    serial = second.read_text(errors="replace").replace("\r", "")
    tick = _name(int(re.search(r"^TICK-IP (0x[0-9a-f]+)$", gdb.stdout, re.M).group(1), 16), ordered, False)
    return (dict(zip(names, named)), serial, dict(zip(names, bts)),
            dict(zip(names, walks)), gdb.stdout + "\nSTDERR\n" + gdb.stderr, root.name, _truths(_trace(serial), tick))


def test_syscall_stop_walks_to_user_mode(booted):
    syscall = booted[0]["syscall"]
    names = [name.split("+")[0] for name, _, _, _, _ in syscall]
    # entry_SYSCALL_64 -> do_syscall_64 -> __x64_sys_openat -> do_sys_openat2 (fs/open.c)
    assert names == ["do_sys_openat2", "__x64_sys_openat", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"]
    assert [o for _, o, _, _, _ in syscall] == ["caller"] * 3 + ["user mode"]
    assert syscall[-1][2] == "regs"


def test_panic_stop_equals_the_kernels_own_trace(booted):
    panic, serial = booted[0]["panic"], booted[1]
    print("panic stop:", [n for n, _, _, _, _ in panic])
    trace = serial.split("Call Trace:", 1)[1].split("</TASK>", 1)[0]
    kernel = [m.group(1) for m in re.finditer(r"\]  (?!\? )(\S+)/0x[0-9a-f]+$", trace, re.M)]
    after_panic = kernel[[n.split("+")[0] for n in kernel].index("panic") + 1:]
    ours = [name for name, _, _, _, _ in panic]
    assert ours[0] == "panic+0x0"
    assert ours[1:] == after_panic, (ours, kernel)
    assert panic[-1][1] == "user mode"


def test_timer_interrupt_walks_through_pt_regs_to_the_end(booted):
    timer = booted[0]["timer"]
    print("timer stop:", [n for n, _, _, _, _ in timer])
    names = [name.split("+")[0] for name, _, _, _, _ in timer]
    assert names[0] == "update_process_times"
    # One interrupt, or more when the tick lands in softirqs run on the way out of an earlier
    # interrupt: each one's entry code holds a full pt_regs; the tick interrupted the kernel
    interrupted = [n for n, (_, outcome, _, _, _) in enumerate(timer) if outcome == "interrupted"]
    assert interrupted and all(timer[n][2] == "regs" for n in interrupted), timer
    assert all(names[n].startswith("asm_") for n in interrupted), names
    assert timer[-1][1] in ("end of stack", "user mode") and len(timer) > interrupted[-1] + 1
    assert all(int(name.split("+0x")[1], 16) < 0x4000 for name, _, _, _, _ in timer)
    # the IRQ stack: one frame's CFA is the task-stack pointer saved on it (SP_INDIRECT),
    # and the stack pointer jumps there (the IRQ stack is a separate area)
    switch = [n for n, (_, _, _, sp_reg, _) in enumerate(timer) if sp_reg == 9]
    assert switch and all(abs(timer[n + 1][4] - timer[n][4]) > 0x1000 for n in switch), timer


@pytest.mark.parametrize("stop", [name for name, _, traced in STOPS if traced])
def test_walk_and_gdb_bt_equal_ftraces_stack_of_the_same_call(booted, stop):
    """The kernel's own unwinder (ftrace's func_stack_trace at the same call, or at the handler
    below an entry stop, from the entry on) names the frames the plugin's walk and GDB's bt name."""
    walks, _, bts, _, _, _, truths = booted
    candidates = truths.get(stop)
    assert candidates, (stop, truths)
    ours = [name.split("+")[0] for name, _, _, _, _ in walks[stop]]
    print(stop, "ftrace:", candidates, "walk:", ours, "GDB:", [name for _, name in bts[stop]])
    assert ours in candidates           # the timer's: one of the ticks that interrupted the stop's pc
    truth = ours
    # GDB prints a clone's name without its number (file_tty_write.constprop.0: "file_tty_write.constprop")
    assert [name for _, name in bts[stop]] == [re.sub(r"\.\d+$", "", name) for name in truth]


def test_gdb_bt_with_the_plugin_is_the_orc_walk_at_every_stop(booted):
    """GDB's own `bt`, the plugin loaded as a user loads it: every frame the ORC walk gives, the same
    pcs (across the interrupt's pt_regs and the IRQ stack), and nothing after the last one."""
    _, _, bts, walks, out, _, _ = booted
    # the plugin's frame filter ends bt at the frame proved outermost; `bt -no-filters` (once) ends with GDB's error
    assert out.count("PC not saved") == 1 and "NO-FILTERS" in out, out.split("NO-FILTERS")[-1]
    for stop, bt in bts.items():
        walk = walks[stop]
        print(stop, "GDB bt:", [name for _, name in bt])
        assert not [f for f in bt if f[0] == "??"], bt
        assert [pc for pc, _ in bt] == [step[0] for step in walk], (bt, walk)


def test_gdb_bt_at_panic_equals_the_kernels_own_trace(booted):
    _, serial, bts, _, _, _, _ = booted
    trace = serial.split("Call Trace:", 1)[1].split("</TASK>", 1)[0]
    kernel = [m.group(1).split("+")[0] for m in re.finditer(r"\]  (?!\? )(\S+)/0x[0-9a-f]+$", trace, re.M)]
    after_panic = kernel[kernel.index("panic") + 1:]
    assert [name for _, name in bts["panic"]] == ["panic"] + after_panic


def test_unwind_modules_lists_the_kernel_and_explain_names_the_orc_entry(booted):
    _, _, _, _, stdout, release, _ = booted
    assert re.search(r"^\[kernel\] at 0xffffffff81000000 \(.*kernel\.elf\)$", stdout, re.M), stdout[-3000:]
    assert re.search(r"ORC: [34]\d{5} entries, layout %s, kernel %s" % (RELEASES[release], re.escape(release)),
                     stdout), stdout[-3000:]
    explained = stdout.split("unwind explain", 1)[-1] if "unwind explain" in stdout else stdout
    assert re.search(r"entry: index 0x[0-9a-f]+, ip 0x[0-9a-f]+, type call, cfa sp\+8", stdout), stdout[-3000:]
    assert "CFA = sp+8   (ORC entry" in explained and "rip = [CFA-8]   rsp = CFA" in explained
    assert "GDB does not read .orc_unwind" in stdout


@pytest.mark.parametrize("stop, entry", [("irq entry", "asm_common_interrupt"), ("fault entry", "asm_exc_page_fault")])
def test_entry_stop_takes_the_interrupted_frame_from_the_iret_frame(booted, stop, entry):
    walk = booted[0][stop]
    print(stop, [(n, o, k) for n, o, k, _, _ in walk])
    assert walk[0][0] == entry + "+0x0" and walk[0][2] == "regs partial"
    assert walk[0][1] in ("interrupted", "user mode")
    assert walk[-1][1] in ("user mode", "end of stack")


def test_entry_stop_gives_the_interrupted_frame_the_registers_the_entry_has_not_changed(booted):
    # At an interrupt's first instruction only the CPU's iret frame is on the stack: every other
    # register still holds the interrupted frame's value, so frame #1's equal frame #0's (the plugin
    # hands them at their callee value, as GDB's DWARF unwinder does an unspecified register).
    walk, stdout = booted[0]["irq entry"], booted[4]
    shown = stdout.split("IRQ-REGS\n", 1)[1].split("IRQ-REGS-END", 1)[0]
    values = re.findall(r"^\$\d+ = (0x[0-9a-f]+|<not saved>)$", shown, re.M)
    if walk[0][1] == "user mode":       # interrupted in user mode: frame #0 is the stack's end
        assert "No frame at level 1" in shown and len(values) == 2, shown
    else:
        assert len(values) == 4 and values[:2] == values[2:] and "<not saved>" not in values, shown


def test_fault_below_walks_through_the_faults_pt_regs(booted):
    walk = booted[0]["fault below"]
    names = [name.split("+")[0] for name, _, _, _, _ in walk]
    print("fault below", names)
    assert names[:4] == ["handle_mm_fault", "do_user_addr_fault", "exc_page_fault", "asm_exc_page_fault"]
    assert walk[3][2] == "regs" and walk[3][1] in ("interrupted", "user mode")
    assert walk[-1][1] in ("user mode", "end of stack")


STOP_VM = """import socket, sys, time
deadline = time.time() + 120
while time.time() < deadline and "end Kernel panic" not in open(sys.argv[2], errors="replace").read():
    time.sleep(0.5)
monitor = socket.socket(socket.AF_UNIX)
monitor.connect(sys.argv[1])
time.sleep(0.3)
monitor.sendall(b"stop\\n")
time.sleep(0.5)
"""


@pytest.mark.parametrize("release", KASLR_RELEASES)
def test_kaslr_slide_is_found_and_gdb_given_it_walks_the_panic(release, tmp_path):
    """KASLR on: the symbol file has the addresses of a nokaslr boot (link addresses, as a
    vmlinux's), the kernel runs elsewhere. The plugin finds the slide the kernel prints ("Kernel
    Offset"), walks the stack from its tables there, and once GDB is given the symbols at that
    slide (symbol-file -o), GDB's bt names the kernel's own panic trace. The guest hangs after its
    panic (panic=0); once the serial console shows the panic's end, QEMU's monitor stops the guest,
    which its gdbstub reports to GDB."""
    root = KERNELS / release
    _tools(root)
    _, symbol_file, _ = _first_boot(root, _initrd(tmp_path), tmp_path)
    serial, monitor = tmp_path / "kaslr.txt", tmp_path / "monitor.sock"
    (tmp_path / "stop_vm.py").write_text(STOP_VM)
    given = ("python import re; out = gdb.execute('unwind modules', to_string=True); "
             "gdb.execute('symbol-file %s -o ' + re.search(r'-o (0x[0-9a-f]+)', out).group(1))" % symbol_file)
    stop = "shell %s %s %s %s &" % (sys.executable, tmp_path / "stop_vm.py", monitor, serial)
    gdb = _gdb_on_qemu(root, _initrd(tmp_path, "#!/bin/busybox sh\nexit 0\n"), serial, symbol_file,
                       [stop, "continue", "unwind modules", "unwind backtrace", given,
                        "echo BT-START\\n", "bt", "echo BT-END\\n"],
                       append="kaslr panic=0", monitor="unix:%s,server,nowait" % monitor)
    text = serial.read_text(errors="replace").replace("\r", "")
    offset = re.search(r"Kernel Offset: (0x[0-9a-f]+) from", text)
    assert offset and int(offset.group(1), 16) != 0, text[-2000:]
    print(gdb.stdout[-3000:])
    assert "KASLR: the kernel runs %s above kernel.elf's symbols" % offset.group(1) in gdb.stdout, gdb.stdout[-3000:]
    walk = re.findall(r"^#\d+ +(0x[0-9a-f]+) in .* \[found by: (.+?)\]", gdb.stdout, re.M)
    assert len(walk) >= 5 and all(how.startswith("ORC") for _, how in walk[1:]), walk
    assert "the saved cs 0x33 is user mode" in gdb.stdout
    bt = _gdb_bt(gdb.stdout)[0]
    trace = text.split("Call Trace:", 1)[1].split("</TASK>", 1)[0]
    kernel = [m.group(1).split("+")[0] for m in re.finditer(r"\]  (?!\? )(\S+)/0x[0-9a-f]+$", trace, re.M)]
    names = [name for _, name in bt]
    assert "panic" in names and names[names.index("panic"):] == kernel[kernel.index("panic"):], (names, kernel)
    assert [pc for pc, _ in bt] == [int(pc, 16) for pc, _ in walk]


MODULE_INIT = """#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox insmod /crc32c_generic.ko
if [ -n "$unwindsyms" ]; then /bin/busybox cat /proc/kallsyms; echo KALLSYMS-DONE; fi
exit 0
"""


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_loaded_modules_frames_come_from_its_own_orc_table(release, tmp_path):
    """crc32c_generic.ko loaded by /init: its registration runs the crypto self-test in a kernel
    thread, which calls the module's chksum_update, which calls the kernel's __crc32c_le_base.
    Stopped there (after load_module, so the call is the module's), the walk goes through the
    module's frame by the module's own ORC table, found in its struct module, to the kernel
    thread's end of stack; GDB's bt with the plugin gives the same frames. (6.12's module is
    xz-compressed: unpacked here, as busybox's insmod does not.)"""
    import lzma
    root = KERNELS / release
    _tools(root)
    crypto = root / "deb/lib/modules" / root.name / "kernel/crypto"
    module = tmp_path / "crc32c_generic.ko"
    packed = crypto / "crc32c_generic.ko.xz"
    module.write_bytes(lzma.decompress(packed.read_bytes()) if packed.exists()
                       else (crypto / "crc32c_generic.ko").read_bytes())
    initrd = _initrd(tmp_path, MODULE_INIT, [module])
    symbols, symbol_file, text = _first_boot(root, initrd, tmp_path)
    assert "[crc32c_generic]" in text, text[-2000:]
    gdb = _gdb_on_qemu(root, initrd, tmp_path / "second.txt", symbol_file,
                       ["hbreak *0x%x" % symbols["load_module"], "continue", "delete",
                        "hbreak *0x%x" % symbols["__crc32c_le_base"], "continue", "unwind modules",
                        "unwind backtrace", "echo BT-START\\n", "bt", "echo BT-END\\n"])
    out = gdb.stdout
    print(out[-4000:])
    listed = r"^\[crc32c_generic\] at 0x[0-9a-f]+ \(memory only\)\n    ORC: \d+ entries"
    assert re.search(listed, out, re.M), out[-3000:]
    assert "found by struct module crc32c_generic at 0x" in out
    walk = re.findall(r"^#(\d+) +(0x[0-9a-f]+) in (\S+) from (\S+)  \[found by: (.+?)\]", out, re.M)
    assert walk[1][2].startswith("chksum_") and walk[1][3] == "[crc32c_generic]", walk
    assert all(how == "ORC .orc_unwind" for *_, how in walk[1:]), walk
    assert walk[-1][2] in ("ret_from_fork", "ret_from_fork_asm"), walk      # 6.12: ret_from_fork_asm
    assert "the entry marks the end of the stack" in out
    bt = _gdb_bt(out)[0]
    assert [pc for pc, _ in bt] == [int(pc, 16) for _, pc, _, _, _ in walk], (bt, walk)


@pytest.mark.parametrize("version", [10, 16])
def test_other_gdb_versions_find_the_kernel_and_walk_a_syscall(version, tmp_path):
    """GDB 10.1 and 16.3 (unpacked beside the system's 13, tests/helpers/gdbversions.py), one stop at
    do_sys_openat2 in Debian 6.1: the kernel is found from its symbol file (GDB 10 names no target
    connection: QEMU's gdbstub's pid 1 is no process of this machine) and GDB's bt with the plugin
    is entry_SYSCALL_64 -> do_syscall_64 -> __x64_sys_openat -> do_sys_openat2 (fs/open.c, as the
    syscall stop's ftrace truth above), ended at the user-mode frame, no `??` after it."""
    import gdbversions
    gdb_path = gdbversions.find_gdb(version)
    if gdb_path is None:
        pytest.fail("GDB %d is not installed: run tests/setup.sh" % version)
    root = KERNELS / "6.1.0-50-amd64"
    _tools(root)
    initrd = _initrd(tmp_path)
    symbols, symbol_file, _ = _first_boot(root, initrd, tmp_path)
    gdb = _gdb_on_qemu(root, initrd, tmp_path / "second.txt", symbol_file,
                       ["hbreak *0x%x" % symbols["do_sys_openat2"], "continue", "unwind modules",
                        "echo BT-START\\n", "bt", "echo BT-END\\n"], gdb=gdb_path)
    out = gdb.stdout
    print(out[-3000:])
    assert gdbversions.exact_version(gdb_path)[0] == version
    assert re.search(r"^\[kernel\] at 0xffffffff81000000 \(.*kernel\.elf\)$", out, re.M), out[-3000:] + gdb.stderr
    bt = _gdb_bt(out)
    assert len(bt) == 1, out[-3000:]
    assert [name for _, name in bt[0]] == ["do_sys_openat2", "__x64_sys_openat", "do_syscall_64",
                                           "entry_SYSCALL_64_after_hwframe"], out[-3000:]


def test_a_walk_through_a_dynamic_ftrace_trampoline(tmp_path):
    """Debian 6.1 with ftrace's function tracer on (INIT): stopped in its callback
    (function_stack_trace_call) called for the marker's own traced call, the callback's caller is a
    dynamic ftrace trampoline (module area, no ORC entry of its own). The plugin looks it up at the
    same offset in ftrace_caller/ftrace_regs_caller (the kernel's orc_ftrace_find), and GDB's bt goes
    on from there: the marker and its callers, as ftrace's func_stack_trace of the same call names them."""
    root = KERNELS / "6.1.0-50-amd64"
    _tools(root)
    initrd = _initrd(tmp_path)
    symbols, symbol_file, _ = _first_boot(root, initrd, tmp_path)
    serial = tmp_path / "second.txt"
    gdb = _gdb_on_qemu(root, initrd, serial, symbol_file,
                       ["hbreak *0x%x" % symbols[MARKER], "continue", "delete",
                        "hbreak *0x%x if $rdi == 0x%x" % (symbols["function_stack_trace_call"], symbols[MARKER]),
                        "continue", "echo BT-START\\n", "bt", "echo BT-END\\n", "unwind backtrace",
                        "unwind explain 2", "delete", "continue"], settle=120)
    out = gdb.stdout
    print(out[-4000:])
    truth = next((names for function, names, _ in _trace(serial.read_text(errors="replace").replace("\r", ""))
                  if function == MARKER), None)
    assert truth, serial.read_text(errors="replace")[-2000:]
    frames = re.findall(r"^#(\d+)\s+(0x[0-9a-f]+) in (\S+) \(", out.split("BT-START", 1)[1].split("BT-END", 1)[0], re.M)
    assert frames[0][2] == "function_stack_trace_call" and frames[1][2] == "??", frames
    assert 0xFFFFFFFFA0000000 <= int(frames[1][1], 16) < 0xFFFFFFFFFF000000, frames      # the module area
    assert [name for _, _, name in frames[2:]] == truth, (frames, truth)
    # the plugin's own walk: the trampoline's frame #1 stepped by ftrace_caller's (or ftrace_regs_caller's) entry
    looked = re.search(r"0x([0-9a-f]+) is in a dynamic ftrace trampoline at 0x([0-9a-f]+): looked up at 0x([0-9a-f]+)", out)
    assert looked, out[-3000:]
    pc, start, copied = (int(group, 16) for group in looked.groups())
    callers = [symbols[name] for name in ("ftrace_caller", "ftrace_regs_caller")]
    assert copied - pc + start in callers and pc + 1 == int(frames[1][1], 16), (looked.groups(), callers)
