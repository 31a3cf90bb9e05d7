"""Debian's 6.1 and 6.12 kernels (two ORC layouts: by version string, by .orc_header)
under QEMU (TCG, nokaslr), stopped by GDB through the
gdbstub, its stack walked with the plugin's ORC rules (tests/helpers/orc_gdb_walk.py).

The initramfs (busybox) prints the kernel's symbols (/proc/kallsyms) to the
serial console and exits, so the kernel panics ("Attempted to kill init") and
prints its own ORC unwinder's stack trace: that trace is the truth for the
stop at `panic`. A first boot, without GDB, gets the symbols (addresses are
fixed by nokaslr); the second stops (STOPS) at a timer tick (the 301st call of
update_process_times, during boot), at an interrupt's first instruction, at
do_sys_openat2 (a syscall from user mode), at a page fault's first
instruction and below it (handle_mm_fault), and at panic. Only the panic
stop has the kernel's own trace as truth; at the others the walk's shape is
checked (through the pt_regs or iret frame to user mode or the end of the stack).
GDB itself is checked too: its `bt` with the plugin loaded (and a symbol file made from
the kallsyms lines, `python -m plugin kallsyms`) gives the walk's frames at every stop, and
`unwind modules` lists the kernel with its ORC table; a loaded module (crc32c_generic) is walked by
its own table (test_a_loaded_modules_frames_come_from_its_own_orc_table). Not yet: truth
from ftrace at the stops other than panic.
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

KERNELS = Path(os.environ.get("UNWIND_KERNEL_ROOT", "/opt/unwind-kernel"))
# Debian 12's 6.1 (ORC layout of v4.14-v6.2, chosen by the version string) and the 6.12 of
# bookworm-backports (layout of v6.4 on, chosen by .orc_header)
RELEASES = {"6.1.0-50-amd64": "v4.14-v6.2 \\(chosen by the kernel version string\\)",
            "6.12.107+deb12-amd64": "v6.4\\+ \\(chosen by the .orc_header hash\\)"}
REPO = Path(__file__).resolve().parents[2]
WALKER = REPO / "tests/helpers/orc_gdb_walk.py"
INIT = """#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox cat /proc/kallsyms
echo KALLSYMS-DONE
exit 0
"""


def _tools(root):
    for tool in ("qemu-system-x86_64", "busybox", "gdb"):
        if shutil.which(tool) is None:
            pytest.fail("%s is missing: run `bash tests/setup.sh` (tests/setup_kernel.sh)" % tool)
    if not (root / "vmlinux").is_file():
        pytest.fail("%s is missing: run `bash tests/setup.sh`" % (root / "vmlinux"))


def _initrd(tmp):
    root = tmp / "root"
    (root / "bin").mkdir(parents=True)
    (root / "proc").mkdir()
    shutil.copy(shutil.which("busybox"), root / "bin/busybox")
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    names = subprocess.run(["find", "."], cwd=str(root), capture_output=True, check=True).stdout
    archive = subprocess.run(["busybox", "cpio", "-o", "-H", "newc"], cwd=str(root), input=names,
                             capture_output=True, check=True).stdout
    (tmp / "initrd").write_bytes(archive)
    return tmp / "initrd"


def _qemu(root, initrd, serial, extra=()):
    image = root / "deb/boot" / ("vmlinuz-" + root.name)
    return ["qemu-system-x86_64", "-m", "512", "-nographic", "-no-reboot", "-kernel", str(image),
            "-initrd", str(initrd), "-append", "console=ttyS0 nokaslr rdinit=/init panic=-1 quiet",
            "-serial", "file:%s" % serial, "-monitor", "none", "-display", "none"] + list(extra)


def _symbols(serial_text):
    symbols = {}
    for address, name in re.findall(r"^([0-9a-f]{16}) [tT] (\S+)$", serial_text, re.M):
        symbols.setdefault(name, int(address, 16))
    return symbols


def _symbol_file(serial_text, tmp):
    """The symbol file GDB is given (python -m plugin kallsyms), from the kallsyms lines the first boot printed."""
    lines = re.findall(r"^[0-9a-f]{16} [A-Za-z] \S+(?:\t\[\S+\])?$", serial_text, re.M)     # modules' too
    (tmp / "kallsyms").write_text("\n".join(lines) + "\n")
    subprocess.run([sys.executable, "-m", "plugin", "kallsyms", str(tmp / "kallsyms"), str(tmp / "kernel.elf")],
                   cwd=str(REPO), check=True, capture_output=True, timeout=120)
    return tmp / "kernel.elf"


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


# (name, function, breakpoint hits ignored): the stops, in the order the kernel reaches them
STOPS = [("timer", "update_process_times", 300),        # a timer tick's handler, below the interrupt entry
         ("irq entry", "asm_common_interrupt", 0),       # an interrupt's first instruction: the iret frame
         ("syscall", "do_sys_openat2", 0),               # a syscall from user mode
         ("fault entry", "asm_exc_page_fault", 0),       # a page fault's first instruction
         ("fault below", "handle_mm_fault", 0),          # below the page fault's pt_regs
         ("panic", "panic", 0)]


@pytest.fixture(scope="module", params=sorted(RELEASES))
def booted(request, tmp_path_factory):
    root = KERNELS / request.param
    _tools(root)
    tmp = tmp_path_factory.mktemp("qemu")
    initrd = _initrd(tmp)
    first = tmp / "first.txt"
    subprocess.run(_qemu(root, initrd, first), capture_output=True, timeout=240)
    text = first.read_text(errors="replace").replace("\r", "")
    assert "KALLSYMS-DONE" in text and "Attempted to kill init" in text, text[-2000:]
    symbols = _symbols(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    second = tmp / "second.txt"
    qemu = subprocess.Popen(_qemu(root, initrd, second, ["-gdb", "tcp:127.0.0.1:%d" % port, "-S"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        walk = ["-ex", "python exec(open(%r).read())" % str(WALKER), "-ex", "echo BT-START\\n", "-ex", "bt",
                "-ex", "echo BT-END\\n"]
        commands = ["-ex", "set pagination off", "-ex", "source %s" % (REPO / "gdb_unwinder/gdbinit.py"),
                    "-ex", "symbol-file %s" % _symbol_file(text, tmp), "-ex", "target remote 127.0.0.1:%d" % port]
        for number, (name, function, ignore) in enumerate(STOPS, 1):
            commands += ["-ex", "delete", "-ex", "hbreak *0x%x" % symbols[function]]
            commands += (["-ex", "ignore %d %d" % (number, ignore)] if ignore else []) + ["-ex", "continue"] + walk
            if name == "timer":
                commands += ["-ex", "unwind modules"]
        gdb = subprocess.run(
            ["gdb", "-nx", "-batch"] + commands + ["-ex", "unwind explain 1", "-ex", "delete", "-ex", "continue"],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, ORC_VMLINUX=str(root / "vmlinux"),
                     ORC_SYS_PATH=":".join([str(REPO)] + [p for p in sys.path if "site-packages" in p])))
        qemu.wait(timeout=120)
    finally:
        qemu.kill()
    walks = [json.loads(line[len("ORC-WALK "):]) for line in gdb.stdout.splitlines()
             if line.startswith("ORC-WALK ")]
    assert len(walks) == len(STOPS), gdb.stdout[-3000:] + gdb.stderr[-3000:]
    ordered = sorted((a, n) for n, a in symbols.items())
    named = [[(_name(pc, ordered, n > 0 and w[n - 1][1] == "caller"), outcome, kind, sp_reg, sp)
              for n, (pc, outcome, kind, sp_reg, sp) in enumerate(w)] for w in walks]
    bts = _gdb_bt(gdb.stdout)
    assert len(bts) == len(STOPS), gdb.stdout[-3000:]
    names = [stop[0] for stop in STOPS]
    return (dict(zip(names, named)), second.read_text(errors="replace").replace("\r", ""), dict(zip(names, bts)),
            dict(zip(names, walks)), gdb.stdout, root.name, (root, initrd, tmp / "kernel.elf", tmp))


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
    # interrupt (seen under TCG at boot): each one's entry code holds a full pt_regs.
    interrupted = [n for n, (_, outcome, _, _, _) in enumerate(timer) if outcome == "interrupted"]
    assert interrupted and all(timer[n][2] == "regs" for n in interrupted), timer
    assert all(names[n].startswith("asm_") for n in interrupted), names
    assert timer[-1][1] == "end of stack" and len(timer) > interrupted[-1] + 2
    assert all(int(name.split("+0x")[1], 16) < 0x4000 for name, _, _, _, _ in timer)
    # the IRQ stack: one frame's CFA is the task-stack pointer saved on it (SP_INDIRECT),
    # and the stack pointer jumps there (the IRQ stack is a separate area)
    switch = [n for n, (_, _, _, sp_reg, _) in enumerate(timer) if sp_reg == 9]
    assert switch and all(abs(timer[n + 1][4] - timer[n][4]) > 0x1000 for n in switch), timer


def test_gdb_bt_with_the_plugin_is_the_orc_walk_at_every_stop(booted):
    """GDB's own `bt`, the plugin loaded as a user loads it: every frame the ORC walk gives, the same
    pcs (across the interrupt's pt_regs and the IRQ stack), and nothing after the last one."""
    _, _, bts, walks, _, _, _ = booted
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
    *_, stdout, release, _ = booted
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


def test_fault_below_walks_through_the_faults_pt_regs(booted):
    walk = booted[0]["fault below"]
    names = [name.split("+")[0] for name, _, _, _, _ in walk]
    print("fault below", names)
    assert names[:4] == ["handle_mm_fault", "do_user_addr_fault", "exc_page_fault", "asm_exc_page_fault"]
    assert walk[3][2] == "regs" and walk[3][1] in ("interrupted", "user mode")
    assert walk[-1][1] in ("user mode", "end of stack")


STOP_VM = """import socket, sys, time
time.sleep(float(sys.argv[2]))
monitor = socket.socket(socket.AF_UNIX)
monitor.connect(sys.argv[1])
time.sleep(0.3)
monitor.sendall(b"stop\\n")
time.sleep(0.5)
"""


def test_kaslr_slide_is_found_and_gdb_given_it_walks_the_panic(booted):
    """KASLR on: the symbol file has the addresses of the nokaslr boot (link addresses, as a
    vmlinux's), the kernel runs elsewhere. The plugin finds the slide the kernel prints ("Kernel
    Offset"), walks the stack from its tables there, and once GDB is given the symbols at that
    slide (symbol-file -o), GDB's bt names the kernel's own trace. The guest hangs after its panic
    (panic=0) and QEMU's monitor stops it, which its gdbstub reports to GDB."""
    root, initrd, symbol_file, tmp = booted[-1]
    serial, monitor = tmp / "kaslr.txt", tmp / "monitor.sock"
    (tmp / "stop_vm.py").write_text(STOP_VM)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = _qemu(root, initrd, serial, ["-gdb", "tcp:127.0.0.1:%d" % port, "-S"])
    command[command.index("-append") + 1] = "console=ttyS0 kaslr rdinit=/init panic=0 quiet"
    command[command.index("-monitor") + 1] = "unix:%s,server,nowait" % monitor
    qemu = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    given = ("python import re; out = gdb.execute('unwind modules', to_string=True); "
             "gdb.execute('symbol-file %s -o ' + re.search(r'-o (0x[0-9a-f]+)', out).group(1))" % symbol_file)
    try:
        time.sleep(0.5)
        gdb = subprocess.run(
            ["gdb", "-nx", "-batch", "-ex", "set pagination off",
             "-ex", "source %s" % (REPO / "gdb_unwinder/gdbinit.py"), "-ex", "symbol-file %s" % symbol_file,
             "-ex", "target remote 127.0.0.1:%d" % port,
             "-ex", "shell %s %s %s 60 &" % (sys.executable, tmp / "stop_vm.py", monitor), "-ex", "continue",
             "-ex", "unwind modules", "-ex", "unwind backtrace", "-ex", given,
             "-ex", "echo BT-START\\n", "-ex", "bt", "-ex", "echo BT-END\\n"],
            capture_output=True, text=True, timeout=300)
    finally:
        qemu.kill()
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
/bin/busybox cat /proc/kallsyms
echo KALLSYMS-DONE
exit 0
"""


def test_a_loaded_modules_frames_come_from_its_own_orc_table(tmp_path):
    """crc32c_generic.ko loaded by /init: its registration runs the crypto self-test in a kernel
    thread, which calls the module's chksum_update, which calls the kernel's __crc32c_le_base.
    Stopped there (after load_module, so the call is the module's), the walk goes through the
    module's frame by the module's own ORC table, found in its struct module, to the kernel
    thread's end of stack; GDB's bt with the plugin gives the same frames."""
    root = KERNELS / "6.1.0-50-amd64"
    _tools(root)
    module = root / "deb/lib/modules" / root.name / "kernel/crypto/crc32c_generic.ko"
    initrd = _initrd(tmp_path)
    tree = tmp_path / "root"
    shutil.copy(str(module), str(tree / "crc32c_generic.ko"))
    (tree / "init").write_text(MODULE_INIT)
    names = subprocess.run(["find", "."], cwd=str(tree), capture_output=True, check=True).stdout
    initrd.write_bytes(subprocess.run(["busybox", "cpio", "-o", "-H", "newc"], cwd=str(tree), input=names,
                                      capture_output=True, check=True).stdout)
    first = tmp_path / "first.txt"
    subprocess.run(_qemu(root, initrd, first), capture_output=True, timeout=240)
    text = first.read_text(errors="replace").replace("\r", "")
    assert "KALLSYMS-DONE" in text and "[crc32c_generic]" in text, text[-2000:]
    symbols = _symbols(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    qemu = subprocess.Popen(_qemu(root, initrd, tmp_path / "second.txt", ["-gdb", "tcp:127.0.0.1:%d" % port, "-S"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        gdb = subprocess.run(
            ["gdb", "-nx", "-batch", "-ex", "set pagination off",
             "-ex", "source %s" % (REPO / "gdb_unwinder/gdbinit.py"),
             "-ex", "symbol-file %s" % _symbol_file(text, tmp_path),
             "-ex", "target remote 127.0.0.1:%d" % port, "-ex", "hbreak *0x%x" % symbols["load_module"],
             "-ex", "continue", "-ex", "delete", "-ex", "hbreak *0x%x" % symbols["__crc32c_le_base"],
             "-ex", "continue", "-ex", "unwind modules", "-ex", "unwind backtrace",
             "-ex", "echo BT-START\\n", "-ex", "bt", "-ex", "echo BT-END\\n"],
            capture_output=True, text=True, timeout=300)
    finally:
        qemu.kill()
    out = gdb.stdout
    print(out[-4000:])
    listed = r"^\[crc32c_generic\] at 0x[0-9a-f]+ \(memory only\)\n    ORC: \d+ entries"
    assert re.search(listed, out, re.M), out[-3000:]
    assert "found by struct module crc32c_generic at 0x" in out
    walk = re.findall(r"^#(\d+) +(0x[0-9a-f]+) in (\S+) from (\S+)  \[found by: (.+?)\]", out, re.M)
    assert walk[1][2].startswith("chksum_") and walk[1][3] == "[crc32c_generic]", walk
    assert all(how == "ORC .orc_unwind" for *_, how in walk[1:]) and walk[-1][2] == "ret_from_fork", walk
    assert "the entry marks the end of the stack" in out
    bt = _gdb_bt(out)[0]
    assert [pc for pc, _ in bt] == [int(pc, 16) for _, pc, _, _, _ in walk], (bt, walk)
