"""A saved stop served to LLDB as a process: LLDB's scripted process (16, 19, 22).

A snapshot is what a debugger has at a stop: each thread's registers, the
memory it can read (stacks, the loaded images) and where each image is
loaded. Served as a scripted process, LLDB treats it as a stopped process:
its own unwinder walks the stack (`thread backtrace`, `image show-unwind`),
and so do the plugin's commands, which read the memory through
SBProcess.ReadMemory like on any live process. That is how a stop taken
anywhere (an emulator, a core of another OS, a test) is put before LLDB's
unwinder, e.g. a Mach-O image's compact unwind on Linux:

    (lldb) command script import CHECKOUT/lldb_commands
    (lldb) target create --arch x86_64-apple-macosx libfoo.dylib
    (lldb) process launch -C lldb_commands.scripted_process.SnapshotProcess -k snapshot -v STOP.json

STOP.json:

    {"images": [{"path": STR, "load_address": INT, "uuid": STR (optional)}],
     "regions": [{"start": INT, "data": BASE64 | "file": PATH (raw bytes, relative
                  to STOP.json), "permissions": "rwx" (a subset; default "rw"),
                  "name": STR (optional)}],
     "threads": [{"tid": INT, "name": STR (optional), "signal": INT | NAME
                  (default "SIGSTOP"), "registers": {NAME: INT}}],
     "pid": INT (optional)}

Register names are LLDB's (x86_64: rax..r15, rip, rflags; arm64: x0..x28,
x29 or fp, x30 or lr, sp, pc, cpsr); a register not given reads as 0. Each
image must be a module of the target (or a file LLDB can load); its UUID is
taken from that module when the snapshot gives none. A region holds what
the process could read there; memory outside every region cannot be read.

Only lldb and the standard library are used here: the core is not needed
to serve memory and registers.

A snapshot that cannot be read is one error line at the launch, and the
process has no threads (raising would make LLDB print a Python traceback).

LLDB 16 quirks handled here:
  * ScriptedProcess::GetMemoryRegions (SBProcess.GetMemoryRegions, `memory
    region --all`) walks the regions with `address += base + size` instead
    of `address = base + size`, and stops only when no region is returned.
    So past the last region no region is returned (a final unmapped region
    up to 2**64 would make that walk wrap around and never end); the list it
    gives is still wrong (it skips regions) and `memory region --all` ends
    with an error. `memory region ADDRESS` is right, and
    lldb_commands/target.py walks the regions itself with
    SBProcess.GetMemoryRegionInfo.
  * Without the image's UUID LLDB 16 loads a second copy of a module the
    target already has (two entries in `image list` at one address).
  * LLDB 16 ignores launch()'s error, and `continue` "resumes" and stops
    at once at the same place: a snapshot cannot run.

LLDB 19 and 22 differ:
  * they no longer load get_loaded_images() themselves (the dynamic loader
    is asked, and a snapshot has none), so launch() sets each image's load
    address through SBTarget.SetModuleLoadAddress (all versions);
  * a resume (the one `process launch` makes, `continue`) waits for a stop
    event whatever resume() answers: resume() forces the state to running
    and back to stopped (SBProcess.ForceScriptedState, 19 and later).
In every version a thread stops with SIGSTOP unless the snapshot says
otherwise, so `lldb -b` goes on after the launch.
"""

import base64
import bisect
import json
import os
import sys

import lldb
from lldb.plugins.scripted_process import ScriptedProcess, ScriptedThread

# A snapshot is a process halted from outside: SIGSTOP, numbered as the
# target's platform numbers it (17 on Darwin, 19 on Linux). LLDB's batch mode
# (`lldb -b`) takes a stop by any other signal for a crash and runs no more
# commands after it.
DEFAULT_SIGNAL = "SIGSTOP"
_PERMISSION_BITS = {"r": lldb.ePermissionsReadable, "w": lldb.ePermissionsWritable,
                    "x": lldb.ePermissionsExecutable}


def _string_arg(args, key):
    """The string value of `key` in the SBStructuredData launch arguments, or None."""
    if args is None or not args.IsValid():
        return None
    value = args.GetValueForKey(key)
    if not value or not value.IsValid():
        return None
    return value.GetStringValue(4096) or None


def load_snapshot(path):
    """(snapshot dict, [(start, bytes, permissions, name)] sorted by start)."""
    with open(path) as handle:
        snapshot = json.load(handle)
    base = os.path.dirname(os.path.abspath(path))
    regions = []
    for region in snapshot.get("regions", []):
        if "data" in region:
            data = base64.b64decode(region["data"])
        else:
            with open(os.path.join(base, region["file"]), "rb") as handle:
                data = handle.read()
        permissions = 0
        for letter in region.get("permissions", "rw"):
            permissions |= _PERMISSION_BITS[letter]
        regions.append((int(region["start"]), data, permissions, region.get("name")))
    regions.sort(key=lambda r: r[0])
    for (start, data, _, _), (next_start, _, _, _) in zip(regions, regions[1:]):
        if start + len(data) > next_start:
            raise ValueError("snapshot regions overlap at 0x%x" % next_start)
    return snapshot, regions


class SnapshotProcess(ScriptedProcess):
    """The process of a snapshot file (launch argument `snapshot`: its path)."""

    def __init__(self, exe_ctx, args):
        super().__init__(exe_ctx, args)
        self.snapshot, self.regions, self._starts, self.pid = {}, [], [], 42
        # A snapshot that cannot be served must not raise: LLDB 16 would print
        # the Python traceback and then only "failed to launch or debug
        # process". It says what is wrong in one line instead and serves a
        # process with no threads (LLDB 16 ignores launch()'s error and
        # is_alive(), so the process still shows as stopped).
        self.problem = None
        path = None
        try:
            path = _string_arg(args, "snapshot")
            if path is None:
                raise ValueError("no snapshot given: launch with -k snapshot -v PATH")
            self.snapshot, self.regions = load_snapshot(path)
            self._starts = [r[0] for r in self.regions]
            self.pid = int(self.snapshot.get("pid", 42))
            for index, info in enumerate(self.snapshot.get("threads", [])):
                thread = SnapshotThread(self, info, index)
                self.threads[thread.tid] = thread
            if not self.threads:
                raise ValueError("it has no threads")
            self.loaded_images = [self._image(i) for i in self.snapshot.get("images", [])]
        except Exception as exc:        # a bad file, bad JSON, a missing key: one line
            self.problem = "%s%s" % ("%s: " % path if path else "", exc)
            self.threads, self.loaded_images = {}, []
            sys.stderr.write("error: the snapshot cannot be served: %s\n" % self.problem)
            sys.stderr.flush()

    def launch(self):
        error = lldb.SBError()
        if self.problem:
            error.SetErrorString(self.problem)
            return error
        problem = self._load_images()
        if problem:
            error.SetErrorString(problem)
        return error

    def _load_images(self):
        """Load every image at its address in the target; an error line or None.

        LLDB 16 loads them itself from get_loaded_images(); LLDB 19 and 22
        leave that to the dynamic loader, which for a snapshot (no dyld, no
        ld.so in it) loads nothing: the modules stay at 0 and `bt` shows
        bare addresses. So the slide of each image (its load address minus
        the file address of its header) is set here, the same in every
        version (setting it again to the same value changes nothing).
        """
        target = self.target
        if target is None or not target.IsValid():
            return "no target to load the images into"
        for image in self.loaded_images:
            module = target.FindModule(lldb.SBFileSpec(image["path"]))
            if not module.IsValid():
                module = target.AddModule(image["path"], target.GetTriple(), image.get("uuid"))
            if not module.IsValid():
                return "cannot load %s" % image["path"]
            header = module.GetObjectFileHeaderAddress()
            if not header.IsValid():
                return "%s has no header address" % image["path"]
            slide = image["load_addr"] - header.GetFileAddress()
            error = target.SetModuleLoadAddress(module, slide)
            if not error.Success():
                return "cannot load %s at 0x%x: %s" % (image["path"], image["load_addr"], error.GetCString())
        return None

    def is_alive(self):
        return self.problem is None

    def _image(self, info):
        image = {"path": info["path"], "load_addr": int(info["load_address"])}
        uuid = info.get("uuid")
        if uuid is None and self.target is not None:
            # The module the target already has: with its UUID LLDB reuses it
            # instead of loading the file a second time.
            module = self.target.FindModule(lldb.SBFileSpec(info["path"]))
            uuid = module.GetUUIDString() if module.IsValid() else None
        if uuid:
            image["uuid"] = uuid
        return image

    # -- memory ----------------------------------------------------------------------
    def _region_index(self, address):
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self.regions[i][0] + len(self.regions[i][1]):
            return i
        return None

    def get_memory_region_containing_address(self, addr):
        i = self._region_index(addr)
        if i is not None:
            start, data, permissions, name = self.regions[i]
            return lldb.SBMemoryRegionInfo(name, start, start + len(data), permissions, True, False)
        # A gap: unmapped up to the next region. Past the last one: none (see the docstring).
        after = bisect.bisect_right(self._starts, addr)
        if after >= len(self.regions):
            return None
        before = self.regions[after - 1] if after > 0 else None
        gap_start = before[0] + len(before[1]) if before else 0
        return lldb.SBMemoryRegionInfo(None, gap_start, self.regions[after][0], 0, False, False)

    def read(self, address, size):
        """Bytes at address (across adjacent regions), or None if any byte is not in the snapshot."""
        out = b""
        while len(out) < size:
            i = self._region_index(address + len(out))
            if i is None:
                return None
            start, data, _, _ = self.regions[i]
            offset = address + len(out) - start
            out += data[offset:offset + size - len(out)]
        return out

    def read_memory_at_address(self, addr, size, error):
        data = lldb.SBData()
        found = self.read(addr, size)
        if found is None:
            error.SetErrorString("0x%x..0x%x is not in the snapshot" % (addr, addr + size))
            return data
        data.SetData(error, found, self.target.GetByteOrder(), self.target.GetAddressByteSize())
        return data

    # -- threads and the rest --------------------------------------------------------
    def get_thread_with_id(self, tid):
        thread = self.threads.get(tid)
        return {"tid": tid, "name": thread.name} if thread else None

    def get_registers_for_thread(self, tid):
        thread = self.threads.get(tid)
        return dict(thread.values) if thread else None

    def get_process_id(self):
        return self.pid

    def resume(self, should_stop=True):
        """A snapshot cannot run: every resume stops again at once, where it was.

        LLDB 16 reports the error and stays stopped. LLDB 19 and 22 (which
        pass should_stop) take any answer as "running" and wait for a stop
        event, forever unless the process itself goes running and stopped
        again (SBProcess.ForceScriptedState, which LLDB 16 lacks).
        """
        process = self.target.GetProcess() if self.target is not None else None
        if process is not None and process.IsValid() and hasattr(process, "ForceScriptedState"):
            process.ForceScriptedState(lldb.eStateRunning)
            process.ForceScriptedState(lldb.eStateStopped)
            return lldb.SBError()
        error = lldb.SBError()
        error.SetErrorString("a snapshot cannot run")
        return error

    def should_stop(self):
        return True

    def get_scripted_thread_plugin(self):
        return "%s.%s" % (__name__, SnapshotThread.__name__)


class SnapshotThread(ScriptedThread):
    """One thread of a snapshot: its registers, stopped by a signal."""

    def __init__(self, process, info, index=0):
        super().__init__(process, None)
        self.tid = int(info.get("tid", index + 1))
        self.idx = index
        self.name = info.get("name") or "snapshot thread %d" % self.tid
        self.signal = info.get("signal", DEFAULT_SIGNAL)
        if not isinstance(self.signal, (int, str)) or isinstance(self.signal, bool):
            raise ValueError("thread %d: signal must be a number or a name like SIGSEGV" % self.tid)
        self.values = {name: int(value) for name, value in info.get("registers", {}).items()}
        known = {r["name"] for r in self.register_info["registers"]}
        known |= {r["alt-name"] for r in self.register_info["registers"] if "alt-name" in r}
        unknown = sorted(set(self.values) - known)
        if unknown:
            raise ValueError("thread %d: registers LLDB does not know here: %s" % (self.tid, ", ".join(unknown)))

    def get_thread_id(self):
        return self.tid

    def get_name(self):
        return self.name

    def get_stop_reason(self):
        return {"type": lldb.eStopReasonSignal, "data": {"signal": self._signal_number()}}

    def _signal_number(self):
        """The signal as a number of the target's platform (a name is looked up there)."""
        if isinstance(self.signal, int):
            return self.signal
        process = self.target.GetProcess() if self.target is not None else None
        number = process.GetUnixSignals().GetSignalNumberFromName(self.signal) if process else -1
        return number if number > 0 else 0

    def get_register_context(self):
        """The registers as LLDB's register info lays them out (little-endian)."""
        registers = self.register_info["registers"]
        size = max(r["offset"] + r["bitsize"] // 8 for r in registers)
        out = bytearray(size)
        for r in registers:
            value = self.values.get(r["name"], self.values.get(r.get("alt-name"), 0))
            width = r["bitsize"] // 8
            out[r["offset"]:r["offset"] + width] = (value & ((1 << r["bitsize"]) - 1)).to_bytes(width, "little")
        return bytes(out)
