"""Bounded mutation fuzz over every path from bytes to output (issue 30).

Two drivers, both forking a child per input with limits (fuzz_offline.py:
1 GB of address space, 10 s):

- fuzz_offline.fuzz: whole files through `python -m plugin tables`, with
  seeds built here (the original offline fuzzer);
- fuzz_targets.fuzz_target, one test per target (fuzz_targets.py lists
  them): each decoder's bytes (CFI in .eh_frame and .debug_frame, compressed
  .debug_frame, .eh_frame_hdr, DWARF expressions, SFrame, compact unwind,
  EHABI) mutated in real files of x86_64, aarch64, armhf, i386 and s390x
  (built here or from the oracle corpus) and in bare sections, then taken
  through the offline commands (`tables` text, JSON, at an address;
  `validate`), a walk from fake registers over a fake stack, every frame's
  explanation (text and JSON) and the evaluation of the rows in force.

In CI each target runs a fixed number of inputs from a fixed seed (the same
inputs every run; about 20 s in all on one core). A longer run, on demand:

    FUZZ_SECONDS=120 .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/realworld/test_fuzz_offline.py

runs each target for that many seconds instead (FUZZ_SEED=N changes the
seed); -s prints each target's executions, outcomes and findings. The same
from the command line, with --save DIR to keep the findings' inputs:

    .venv/bin/python tests/realworld/fuzz_targets.py --seconds 120 [TARGET...]
"""

import io
import os
import sys

import pytest

import fuzz_offline
import fuzz_targets
from support import build

SECONDS = float(os.environ.get("FUZZ_SECONDS", 0))
SEED = int(os.environ.get("FUZZ_SEED", 7))
EXECUTIONS = {"dwarf_expr": 80, "sframe_section": 100, "unwind_info_section": 40, "validate": 8}
FILE_EXECUTIONS = 12
TARGETS = ("eh_frame", "eh_frame_hdr", "debug_frame", "debug_frame_zlib", "sframe", "exidx", "elf_headers",
           "macho", "validate", "dwarf_expr", "sframe_section", "unwind_info_section")


def seeds():
    return [
        build("chain.c", ["-O2"]),
        build("chain.c", ["-O2", "-Wa,--gsframe"], name="chain-sframe"),
        build("chain.c", ["-O1", "-fno-asynchronous-unwind-tables"],
              post=[["objcopy", "--compress-debug-sections=zlib", "{out}"]], name="chain-df-zlib"),
        build("chain.c", ["-c", "-O2", "-ffunction-sections"], name="chain-obj-eh_frame"),
        "/usr/lib/x86_64-linux-gnu/crt1.o",
    ]


def test_short_fuzz_run_finds_nothing():
    out = io.StringIO()
    summary = fuzz_offline.fuzz([str(p) for p in seeds()], SECONDS or 4, seed=SEED, out=out)
    sys.stdout.write(out.getvalue())
    assert summary["executions"] > 10, out.getvalue()
    assert summary["findings"] == [], out.getvalue()
    assert summary["slowest_seconds"] < 10 and summary["peak_rss_mb"] < 500, out.getvalue()
    # The mutations reach every outcome: decoded, some entries bad, refused.
    assert {"rc 0", "rc 1", "rc 2"} <= set(summary["outcomes"]), out.getvalue()


@pytest.fixture(scope="module")
def every_target():
    return fuzz_targets.targets()


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_target_finds_nothing(every_target, name):
    target = every_target[name]
    assert len(target.seeds) >= (2 if name != "debug_frame_zlib" else 1), [s.name for s in target.seeds]
    executions = 0 if SECONDS else EXECUTIONS.get(name, FILE_EXECUTIONS)
    summary = fuzz_targets.fuzz_target(target, executions, SECONDS, SEED)
    out = io.StringIO()
    fuzz_targets.report([summary], out)
    sys.stdout.write(out.getvalue())
    assert summary["findings"] == {}, out.getvalue()
    assert summary["executions"] == executions or SECONDS, out.getvalue()
    # The inputs are not all refused at the door: most reach the decoders and renderers.
    refused = sum(n for label, n in summary["outcomes"].items() if "rc 2" in label.split(";")[0])
    assert refused < summary["executions"] / 2, out.getvalue()


def test_every_architecture_seeds_a_target(every_target):
    """x86_64, aarch64, armhf, i386 and s390x files (and Mach-O) are among the seeds."""
    names = {seed.name for target in every_target.values() for seed in target.seeds}
    for arch in ("x86_64", "aarch64", "armhf", "i386", "s390x", "macho-"):
        assert any(n.startswith(arch) for n in names), (arch, sorted(names))
    sframe = {seed.name for seed in every_target["sframe"].seeds}
    assert {"x86_64-sframe", "aarch64-sframe", "s390x"} <= sframe
