"""The runtime matrix: programs in C, C++, Rust and Go built with Debian's toolchains at
test time (tests/fixtures/runtimes/), and the stops people debug in them.

Builds are cached under tests/.build/ by content: gcc/g++ through support.build,
rustc (Debian's /usr/bin/rustc, not a rustup one on PATH) and go (Debian's
/usr/bin/go, its build cache under tests/.build/gocache) here.

Each Stop names where the debugger's own walk is known right: `truth_ends` is
the function (at the frame's exact pc, as `info symbol` names it) of the
outermost frame the debuggers get right. Above it GDB shows frames that are
not callers (past __start_context the context's stale words, past
runtime.goexit a 0 return address, past runtime.systemstack g0's stale
words); the plugin's walk must end there, with the stop reason `ends_by`.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from typing import Optional

import pytest

from support import BUILD, FIXTURES, build

RUSTC = "/usr/bin/rustc"
GO = "/usr/bin/go"
SOURCES = FIXTURES / "runtimes"


def _cached(source, tool, argv, env=None, tag=""):
    src = SOURCES / source
    if not os.access(tool, os.X_OK):
        pytest.fail("%s is not installed: run tests/setup.sh (Debian's golang-go and rustc)" % tool)
    key = hashlib.sha256(src.read_bytes() + repr((argv, tag)).encode()).hexdigest()[:12]
    out = BUILD / ("%s-%s%s" % (src.stem, tag, key))
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp%d" % os.getpid())
    done = subprocess.run([tool, *argv, "-o", str(tmp), str(src)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    tmp.rename(out)
    return out


def build_rust(source):
    return _cached(source, RUSTC, ["-g", "-C", "opt-level=0"])


def build_go(source, goarch="amd64"):
    env = dict(os.environ, GOCACHE=str(BUILD / "gocache"), GOPATH=str(BUILD / "gopath"), GOFLAGS="",
               GOARCH=goarch, GOOS="linux", CGO_ENABLED="0", GO111MODULE="off")
    return _cached(source, GO, ["build"], env=env, tag=goarch + "-")


@dataclass(frozen=True)
class Stop:
    program: str                # key of PROGRAMS
    args: tuple
    breakpoint: Optional[str]   # None: run to a signal
    truth_ends: str             # the outermost frame the debuggers get right
    setup: tuple = ()
    lldb_truth_ends: Optional[str] = None   # where LLDB's own walk is right, when it stops earlier
    lldb_setup: tuple = ()
    ends_by: str = "outermost"      # the stop reason the plugin's walk must end with
    extra: dict = field(default_factory=dict)   # skip_hits: continue N times; then: break there and continue


PROGRAMS = {
    "c-ucontext": lambda: build("runtimes/coroutine_ucontext.c", ["-O1"]),
    "cpp-exception": lambda: build("runtimes/exception.cpp", ["-O1"], compiler="g++"),
    "cpp-coroutine": lambda: build("runtimes/coroutine.cpp", ["-O1", "-std=c++20", "-fcoroutines"], compiler="g++"),
    "rust-panic": lambda: build_rust("panic.rs"),
    "rust-overflow": lambda: build_rust("overflow.rs"),
    "go": lambda: build_go("goroutine.go"),
}

SEGV_PASS = ("handle SIGSEGV nostop noprint pass",)
PENDING = ("set breakpoint pending on",)
# Go preempts goroutines with SIGURG, which LLDB stops at by default (GDB does not)
GO_LLDB = ("process handle SIGURG --stop false --pass true --notify false",)

STOPS = {
    "c-makecontext": Stop("c-ucontext", (), "stop_here", "__start_context"),
    "cpp-exception-dtor": Stop("cpp-exception", ("dtor",), "stop_here", "_start"),
    "cpp-exception-catch": Stop("cpp-exception", ("catch",), "stop_here", "_start"),
    "cpp-exception-personality": Stop("cpp-exception", ("catch",), "__gxx_personality_v0", "_start", PENDING),
    "cpp-coroutine": Stop("cpp-coroutine", (), "stop_here", "_start"),
    "rust-panic": Stop("rust-panic", (), "rust_panic", "_start"),
    "rust-overflow-main": Stop("rust-overflow", ("main",), None, "_start", SEGV_PASS),
    "rust-overflow-thread": Stop("rust-overflow", ("thread",), None, "clone3", SEGV_PASS,
                                 lldb_truth_ends="__clone3"),      # LLDB names the alias
    "go-goroutine": Stop("go", (), "main.stopHere", "runtime.goexit", lldb_setup=GO_LLDB),
    "go-main": Stop("go", (), "main.stopHere", "runtime.goexit", extra={"skip_hits": 1}, lldb_setup=GO_LLDB),
    "go-mallocgc": Stop("go", (), "main.allocate", "runtime.goexit", extra={"then": "runtime.mallocgc"},
                        lldb_setup=GO_LLDB),
    # runtime.systemstack runs mheap.alloc's closure on the g0 stack: past systemstack both
    # debuggers read g0's stale words as frames; the plugin stops there and says why.
    "go-systemstack": Stop("go", (), "main.allocate", "runtime.systemstack", lldb_setup=GO_LLDB,
                           extra={"then": "runtime.(*mheap).allocSpan"}, ends_by="stack-switch"),
}


def bare(name):
    """A function name as the matrix compares it: no Go ABI suffix, no offset."""
    name = (name or "").split(" + ")[0].split(" in section")[0].strip()
    for suffix in (".abi0", ".abiinternal"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def truth_length(names, truth_ends):
    """How many frames, from the innermost, the debugger gets right: up to the first named truth_ends."""
    bare_names = [bare(n) for n in names]
    assert truth_ends in bare_names, "the debugger's walk never reaches %s: %s" % (truth_ends, bare_names)
    return bare_names.index(truth_ends) + 1
