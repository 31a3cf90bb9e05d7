"""The one guard for damaged files (plugin.errors.guard) where every dump passes
(render/tables.iter_sources) and where file targets read their symbols: a
source that meets bad bytes costs only itself, as one problem line."""

import dataclasses
import io
import json
import struct

import pytest
from elftools.common.exceptions import ELFError

from plugin.errors import DecodeError, bad_file_errors, guard
from plugin.render import tables
from plugin.file_targets.elf import LaidOutFile


def test_guard_turns_bad_file_errors_into_one_problem():
    for error in (ELFError("bad"), ValueError("seek out of range"), struct.error("short"),
                  DecodeError(".sframe", 4, "bad FDE"), OSError(5, "Input/output error")):
        problems = []
        with guard(problems, "m: sframe") as done:
            raise error
        assert done.failed and len(problems) == 1 and problems[0].startswith("m: sframe: ")
    assert isinstance(ValueError(), bad_file_errors())


def test_guard_lets_defects_through():
    with pytest.raises(KeyError):
        with guard([], "m"):
            raise KeyError("a defect is not a damaged file")


class Module:
    name = "m"

    def __init__(self):
        from plugin.arch import x86_64
        self.arch = x86_64.ARCH
        self.tables = {}
        self.cache = {}


class Modules:
    failed = []

    def __init__(self, module):
        self.module = module

    def all(self):
        return [self.module]

    def find(self, address):
        return self.module


def good_source(target, module, address, problems):
    return [{"kind": "exidx", "module": module.name, "section": ".ARM.exidx", "address": 0x100,
             "entries": [{"start": 0x100, "end": 0x200, "kind": "cantunwind", "rows": [], "rows_text": []}]}]


def failing_entries(target, module, address, problems):
    def entries():
        yield {"start": 0x100, "end": 0x200, "kind": "cantunwind", "rows": [], "rows_text": []}
        raise ValueError("seek out of range")        # what pyelftools lets through
    return [{"kind": "exidx", "module": module.name, "section": ".ARM.exidx", "address": 0x100,
             "entries": _Lazy(entries)}]


class _Lazy:
    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 2

    def __iter__(self):
        return self.make()


def failing_source(target, module, address, problems):
    raise ELFError("Unexpected section type")


@pytest.mark.parametrize("exidx, problem", [
    (failing_source, "m: exidx: Unexpected section type"),
    (failing_entries, "m: exidx: seek out of range"),
])
def test_a_source_that_meets_bad_bytes_costs_only_itself(monkeypatch, exidx, problem):
    def dump_with(kind, table_sources):
        monkeypatch.setitem(tables.DUMPS, kind, dataclasses.replace(tables.DUMPS[kind], table_sources=table_sources))
    dump_with("exidx", exidx)
    dump_with("sframe", good_source)
    target = LaidOutFile()
    target._lay_out([])
    modules = Modules(Module())
    dump_with("cfi", lambda *args, **kw: [])
    dump_with("compact", lambda *args: [])
    out = io.StringIO()
    problems = tables.write_json(target, modules, None, out)
    result = json.loads(out.getvalue())
    assert problem in result["problems"] and list(problems) == result["problems"]
    assert result["sources"][0]["entries"][0]["kind"] == "cantunwind"      # the good source is whole
    out = io.StringIO()
    tables.write_text(target, modules, None, out)
    assert out.getvalue().splitlines()[-1] == "problem: " + problem
    assert "[0x100, 0x200) cantunwind" in out.getvalue()


def test_a_damaged_symbol_table_costs_the_names_once():
    class File(LaidOutFile):
        name = "f"

        def _read_symbols(self):
            raise ValueError("seek out of range")

    target = File()
    assert target.symbol(0x1000) is None and target.symbol(0x2000) is None
    assert target.problems == ["f: symbols not read (functions are not named): seek out of range"]


def test_a_symbol_table_whose_type_is_damaged_has_no_symbols():
    """The fuzzer's exidx target: a .symtab whose sh_type was mutated is a plain Section in
    pyelftools, without iter_symbols; it holds no symbols rather than raising AttributeError."""
    from types import SimpleNamespace
    from plugin.modules.on_disk import function_symbols
    plain = SimpleNamespace()       # a section of no symbol-table type: no iter_symbols
    elf = SimpleNamespace(get_section_by_name=lambda name: plain)
    assert list(function_symbols(elf)) == []
