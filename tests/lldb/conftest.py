"""Every LLDB test runs against each LLDB version present (16, 19, 22).

Each test gets a `lldb_version` parameter (ids `lldb16`, `lldb19`,
`lldb22`); an autouse fixture makes run_lldb()/run_batch() use that
version. In CI (CI set) all of lldbrun.VERSIONS are required: a missing one
fails its tests instead of being left out.

Time: the whole suite takes about 3.5 minutes per version on two busy
cores, so LLDB 16 runs all of it and 19 and 22 a representative subset:
every test that is not parametrized (every command, the settings, batch
mode, bad arguments, the scripted process served from a snapshot), every
termination case and every scripted-process stop, and for the other
parametrized tests the cases in SUBSET. UNWIND_LLDB_EVERY=1 runs
everything on every version; UNWIND_LLDB_VERSIONS=19,22 picks versions.
"""

import os

import pytest

from support import every

import lldbrun

FULL_VERSION = 16

# test function -> the parameter ids (without the version) run on every version;
# a parametrized test not named here runs on every version in full.
SUBSET = {
    "test_backtrace_matches_lldb": {"plain-O2", "libc-breakpoint-O2", "qsort-O2", "signal-O0",
                                    "thread-O2-nofp", "vdso-O0", "plt-O0"},
    "test_static_tables_match_offline": {"O2-sframe"},
    "test_fallbacks_recover_every_frame_lldb_recovers_on_a_stripped_binary": {"plain-O2-nofp", "qsort-O0"},
    "test_jit_code_in_an_anonymous_mapping": {"O2-nofp"},
    "test_tables_match_offline_and_lldb_plans": {"engine-x86_64-O2-nofp", "engine-arm64-O2-fp"},
    "test_fast_backtrace_equals_the_engines_walk": {"recurse-O2-nofp", "signal-O0", "python3"},
    "test_provider_keeps_lldbs_frames_where_lldb_is_right": {"jit-O2-nofp", "sframe-only-O2"},
}


def _versions():
    chosen = os.environ.get("UNWIND_LLDB_VERSIONS")
    if chosen:
        return [int(v) for v in chosen.split(",") if v.strip()]
    if os.environ.get("CI"):
        return list(lldbrun.VERSIONS)
    return [v for v in lldbrun.VERSIONS if v == FULL_VERSION or lldbrun.find_lldb(v) is not None]


def pytest_generate_tests(metafunc):
    if "lldb_version" in metafunc.fixturenames:
        metafunc.parametrize("lldb_version", _versions(), indirect=True,
                             ids=["lldb%d" % v for v in _versions()])


@pytest.fixture(autouse=True)
def lldb_version(request):
    version = request.param
    lldbrun.use(version)
    lldbrun.current()           # fails the test (never skips) when this version is missing
    yield version
    lldbrun.use(FULL_VERSION)


def _in_subset(item):
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("lldb_version", FULL_VERSION) == FULL_VERSION:
        return True         # not an LLDB test (GDB tests share some names), or LLDB 16's
    wanted = SUBSET.get(item.originalname)
    if wanted is None:
        return True
    rest = [part for part in callspec.id.split("-") if not part.startswith("lldb")]
    return "-".join(rest) in wanted


def pytest_collection_modifyitems(config, items):
    if every("UNWIND_LLDB_EVERY"):
        return
    kept = [item for item in items if _in_subset(item)]
    dropped = [item for item in items if not _in_subset(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
