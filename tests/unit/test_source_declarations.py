"""One declaration per source (issue 32 item 1): the data in plugin.settings.SOURCES and
the bindings (plugin.strategies.registry, plugin.render.tables.DUMPS) name the same sources,
and what the engine, plans and claim policy read is derived from the declaration."""

from __future__ import annotations

from plugin import engine, plans, settings
from plugin.strategies import registry
from plugin.strategies.row_step import step_with_row


def test_every_declared_source_has_a_strategy_and_no_other_name_does():
    assert set(registry.STRATEGIES) == {s.name.value for s in settings.SOURCES}
    assert engine.STRATEGIES is registry.STRATEGIES
    assert engine.DEFAULT_SOURCES == ("cfi", "sframe", "compact", "exidx", "pdata", "orc", "analysis", "frame-pointer",
                                      "scan")


def test_planned_sources_come_from_the_declaration():
    assert plans.PLANNED_SOURCES == ("cfi", "sframe", "analysis")
    assert settings.source_names(planned=False) == ("compact", "exidx", "pdata", "orc", "frame-pointer", "scan")


def test_a_planned_source_steps_through_a_row():
    # plans replay a row: a planned source's strategy module must reach row_step.step_with_row
    import inspect
    for name in plans.PLANNED_SOURCES:
        module = inspect.getmodule(registry.STRATEGIES[name])
        assert "step_with_row" in inspect.getsource(module), name
    assert step_with_row is not None


def test_sections_gdb_reads_are_declared_with_their_source():
    assert settings.gdb_sections() == (".eh_frame", ".debug_frame")
    assert [s.name.value for s in settings.SOURCES if s.gdb_sections] == ["cfi"]


def test_found_by_words_and_kinds_are_declared_once():
    assert settings.TRUST_WORDS["sframe"] == "SFrame"
    assert settings.kind_of("analysis") == settings.SourceKind.PROOF
    assert settings.is_guess("scan") and not settings.is_guess("cfi")


def test_the_mach_o_and_kernel_orders_are_declared_with_their_sources():
    assert settings.GOES_BEFORE == (("compact", "macho", "cfi"), ("orc", "kernel", "cfi"))


def test_a_rule_shows_its_expression_disassembled_once_formats_are_loaded():
    # model/rules.py no longer imports formats (layers): plugin.formats installs the disassembler
    import subprocess
    import sys
    code = ("from plugin.model.rules import CfaKind, CfaRule\n"
            "from plugin.arch import x86_64\n"
            "rule = CfaRule(CfaKind.EXPRESSION, expression=bytes([0x77, 0x08]))\n"
            "print(rule.text(x86_64.ARCH))\n"
            "import plugin.formats.cfi\n"
            "print(rule.text(x86_64.ARCH))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2])).stdout.splitlines()
    assert out == ["(DWARF expression 7708)", "(DW_OP_breg7 (rsp) +8)"]
