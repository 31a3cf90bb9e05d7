"""Every GDB test runs against each GDB version present (10.1, 13.1, 16.3).

Each test gets a `gdb_version` parameter (ids `gdb10`, `gdb13`, `gdb16`);
an autouse fixture makes need_tool("gdb") and need_tool("gdb-multiarch")
(so run_gdb() and every gdb the tests start) return that version's
(tests/helpers/gdbversions.py; 10 and 16 are unpacked by tests/setup.sh).
In CI (CI set) all of gdbversions.VERSIONS are required: a missing one
fails its tests instead of being left out.

Time: GDB 13, the system's, runs every test. 10 and 16 run a representative
subset: every test that is not parametrized, and for the parametrized tests
the cases in SUBSET (a parametrized test not named there runs in full).
UNWIND_GDB_EVERY=1 runs everything on every version; UNWIND_GDB_VERSIONS=10,16
picks versions.
"""

import os

import pytest

from support import every

import gdbversions

FULL_VERSION = gdbversions.FULL_VERSION

# test function -> the parameter ids (without the version) run on every version
SUBSET = {
    "test_bt_unchanged_and_plugin_walk_matches_gdb": {"plain-O2", "signal-O0", "libc-breakpoint-O2-nofp",
                                                      "qsort-callback-O2-debug-frame", "plt-O0", "thread-O2",
                                                      "vdso-O2-nofp", "realign-O2"},
    "test_fixture_transcripts_are_unchanged": {"plain-O2", "signal-O2-nofp", "qsort-libc-O2"},
    "test_real_program_transcripts_are_unchanged": {"ls", "python3"},
    "test_claim_all_frames_registers_and_values_match": {"recurse-O2-nofp", "realign-O2"},
    "test_claim_all_gives_every_register_gdb_gives": {"plain-O2-nofp", "alloca-O0"},
    "test_set_var_in_callers_is_unchanged": {"O2-nofp"},
    "test_corrupted_stack_ends_with_its_reason": {"zero-ra", "unmapped-fp"},
    # the 10,000-frame walks take 15-70 s per GDB: GDB 13 runs them in CI, 10 and 16 with
    # UNWIND_GDB_EVERY (or UNWIND_EVERYTHING)
    "test_deep_recursion_walks_to_clone3_when_allowed": set(),
    "test_fast_claims_equal_the_engine_on_optimised_code": {"flags1"},
    "test_auto_declines_from_the_pc_alone_as_the_slow_path_does": {"scenario0"},
    "test_every_step_walks_like_gdb": {"signal"},
    "test_every_step_gdbs_own_frames_with_claim_all_equal_gdb_alone": {"signal"},
    "test_jit_code_in_an_anonymous_mapping": {"O2-nofp"},
    "test_fallbacks_recover_every_frame_gdb_recovers_on_a_stripped_binary": {"qsort-O2-nofp", "thread-O0"},
    "test_plans_equal_the_engine_on_fixtures": {"signal-O2-nofp", "recurse-O2"},
    "test_runtime_stop_bt_unchanged": {"cpp-exception-catch", "go-goroutine", "rust-panic", "c-makecontext"},
    "test_runtime_stop_walk_matches_gdb": {"cpp-exception-catch", "go-goroutine", "rust-panic", "c-makecontext"},
    "test_go_by_frame_pointers_alone": {"go-main"},
    "test_go_arm64_frame_pointer_walk_matches_gdb": {"main"},
    "test_the_model_gives_gdbs_own_callers_on_the_matrix_programs": {"x86_64 signal -O2, no symbols"},
    "test_row": {"x86_64 signal -O2", "x86_64 plain -O0, no symbols", "aarch64 plain -O2, no symbols"},
    "test_explain_golden": {"chain-O2"},
    "test_start_from_the_neighbouring_table_recovers_every_frame": {"x86_64-sframe"},
    "test_call_through_a_bad_function_pointer": {"null-O1", "wild-O0"},
    "test_parent_side_of_clone3_walks_to_start": {"O1"},
    "test_a_trap_handler_is_looked_up_at_its_exact_pc": {"noexecstack"},
    "test_v1_fixture_without_cfi_gives_the_right_bt": {"mode0"},
    "test_core_without_the_executable": {"qsort-getpid"},
    "test_cfi_walk_equals_gdb": {"O2-signal", "O2-nofp-qsort"},
    "test_fallbacks_equal_gdb_on_the_twin_with_tables": {"O2-nofp-qsort"},
    "test_walk_equals_gdb": {"arm-O2-plain", "thumb-O2-throw"},
    "test_scan_takes_thumb_and_arm_return_addresses": {"thumb-O0"},
    "test_every_instruction_gives_the_right_caller_or_none": {"thumb-O2-level2"},
    "test_every_instruction_of_debian_libstdcxx": {"__cxa_begin_catch"},
    "test_call_sites_gdb_unwinds_by_ehabi_are_left_to_it": {"thumb-O2"},
    "test_dynamic_walk_equals_gdb": {"thumb-O2"},
    "test_cfi_walks_on_from_a_leaf_first_instruction": {"arm-O2"},
    "test_walk_from_inside_the_personality_routine": {"thumb-O2"},
}


# What a GDB version cannot do on this machine, and the tests (name, or (name, case)) that need it.
GDB10_SIGNALS = ("GDB 10.1 alone cannot unwind through Debian 12's signal trampoline: its BFD (binutils 2.35) "
                 "knows no SHT_RELR section (libc.so.6's .relr.dyn), takes libc for an unknown architecture "
                 "and unwinds __restore_rt as i386 ('Cannot access memory at address 0xffffd9e0')")
GDB10_TAILCALLS = "GDB 10.1 builds no tail-call frames from GCC 12's DWARF 5 call-site entries (bt shows none)"
LACKS = {
    10: {
        "test_auto_remembers_the_frame_a_signal_interrupted": GDB10_SIGNALS,
        ("test_bt_unchanged_and_plugin_walk_matches_gdb", "signal-O0"): GDB10_SIGNALS,
        ("test_row", "x86_64 signal -O2"): GDB10_SIGNALS,
        "test_signal_frame_is_explained_and_compare_agrees_there": GDB10_SIGNALS,
        ("test_plans_equal_the_engine_on_fixtures", "signal-O2-nofp"): GDB10_SIGNALS,
        "test_demo_sframe_only_walks_match_gdb": GDB10_SIGNALS,        # the demo reaches realign in a handler
        "test_demo_explain_shows_the_flex_drap_rule": GDB10_SIGNALS,
        "test_stripped_demo_gdb_loses_the_chain_and_sframe_recovers_it": GDB10_SIGNALS,
        "test_signal_stack_above_the_interrupted_stack": GDB10_SIGNALS,
        ("test_every_step_walks_like_gdb", "signal"): GDB10_SIGNALS,
        ("test_every_step_gdbs_own_frames_with_claim_all_equal_gdb_alone", "signal"): GDB10_SIGNALS,
        ("test_fixture_transcripts_are_unchanged", "signal-O2-nofp"): GDB10_SIGNALS,
        ("test_the_model_gives_gdbs_own_callers_on_the_matrix_programs", "x86_64 signal -O2, no symbols"):
            GDB10_SIGNALS,
        ("test_auto_declines_from_the_pc_alone_as_the_slow_path_does", "scenario0"): GDB10_SIGNALS,
        "test_tail_call_levels_match_gdb": GDB10_TAILCALLS,
        "test_tail_calls_through_jmp_keep_gdbs_tail_call_frames": GDB10_TAILCALLS,
    },
}


def _versions():
    chosen = os.environ.get("UNWIND_GDB_VERSIONS")
    if chosen:
        return [int(v) for v in chosen.split(",") if v.strip()]
    if os.environ.get("CI"):
        return list(gdbversions.VERSIONS)
    return [v for v in gdbversions.VERSIONS if v == FULL_VERSION or gdbversions.find_gdb(v) is not None]


def pytest_generate_tests(metafunc):
    if "gdb_version" in metafunc.fixturenames:
        # a module setting ONE_GDB = True runs the system's GDB only (GDB's own testsuite)
        versions = [FULL_VERSION] if getattr(metafunc.module, "ONE_GDB", False) else _versions()
        metafunc.parametrize("gdb_version", versions, indirect=True, ids=["gdb%d" % v for v in versions])


@pytest.fixture(autouse=True)
def gdb_version(request):
    version = request.param
    gdbversions.use(version)
    gdbversions.program("gdb")       # fails the test (never skips) when this version is missing
    yield version
    gdbversions.use(FULL_VERSION)


def _case(item, version):
    """The test's parameter id without the version."""
    callspec = getattr(item, "callspec", None)
    parts = callspec.id.split("-") if callspec is not None else []
    return "-".join(part for part in parts if part != "gdb%d" % version)


def _lacking(item):
    """Why the test's GDB version cannot run it here, or None."""
    callspec = getattr(item, "callspec", None)
    version = callspec.params.get("gdb_version") if callspec is not None else None
    if version is None:         # not a GDB test (this hook sees every test of the session)
        return None
    lacks = LACKS.get(version, {})
    return lacks.get(item.originalname) or lacks.get((item.originalname, _case(item, version)))


def _in_subset(item):
    callspec = getattr(item, "callspec", None)
    version = callspec.params.get("gdb_version", FULL_VERSION) if callspec else FULL_VERSION
    if version == FULL_VERSION:
        return True
    wanted = SUBSET.get(item.originalname)
    if wanted is None:
        return True
    return _case(item, version) in wanted


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = _lacking(item)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    if every("UNWIND_GDB_EVERY"):
        return
    kept = [item for item in items if _in_subset(item)]
    dropped = [item for item in items if not _in_subset(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
