"""Layers point one way (issue 32 item 2): every import in plugin/, gdb_unwinder/ and
lldb_commands/, at top level or inside a function, goes to the same layer or one below.
The order is documented in docs/design.md ("Layers"). KNOWN lists the violations that
existed when this test was written; the list may only shrink (a listed edge that no
longer exists fails too, so it is removed when fixed)."""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, Iterator, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("plugin", "gdb_unwinder", "lldb_commands")

# Lowest first. A unit is a package ("plugin.formats") or a top-level module ("plugin.engine").
LAYERS = (
    ("plugin", "plugin.errors", "plugin.leb128", "plugin.memory", "plugin.target", "plugin.cache"),
    ("plugin.model",),
    ("plugin.arch",),
    ("plugin.formats",),
    ("plugin.analysis", "plugin.modules", "plugin.checks", "plugin.settings"),
    ("plugin.file_targets",),
    ("plugin.strategies",),
    ("plugin.debugger_heuristic", "plugin.plans", "plugin.engine", "plugin.validate"),
    ("plugin.render",),
    ("plugin.commands",),
    ("plugin.api", "plugin.bootstrap", "plugin.install", "plugin.__main__"),
    ("gdb_unwinder", "lldb_commands"),
)
# Edges between units of one layer that are forbidden all the same: the adapters never import
# each other.
ACROSS = {("gdb_unwinder", "lldb_commands"), ("lldb_commands", "gdb_unwinder")}

# (importing module, imported module): upward imports that exist today (issue 32 item 2).
KNOWN: Set[Tuple[str, str]] = set()


def unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "plugin" or len(parts) == 1:
        return parts[0]
    return "plugin." + parts[1]


RANK: Dict[str, int] = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def modules() -> Iterator[Tuple[str, pathlib.Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield (name[: -len(".__init__")] if name.endswith(".__init__") else name), path


def is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: pathlib.Path) -> Set[str]:
    """Every project module the file names in an import, anywhere in the file."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from plugin import arch` names the module plugin.arch, not plugin's names
            names = [node.module + "." + alias.name for alias in node.names]
            submodules = [name for name in names if is_module(name)]
            found.update(submodules)
            if len(submodules) < len(names):
                found.add(node.module)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def edges() -> Set[Tuple[str, str]]:
    return {(name, target) for name, path in modules() for target in imports(path)}


def is_upward(source: str, target: str, graph: Set[Tuple[str, str]] = frozenset()) -> bool:
    a, b = unit(source), unit(target)
    if a == b:
        # inside one unit: a package's __init__ importing a submodule that imports the
        # package back is a cycle
        return (target, source) in graph and target.startswith(source + ".")
    if (a, b) in ACROSS:
        return True
    return RANK[b] > RANK[a]


def test_every_unit_has_a_layer():
    assert sorted({unit(name) for name, _ in modules()} - set(RANK)) == []


def test_no_import_points_up():
    graph = edges()
    upward = {edge for edge in graph if is_upward(*edge, graph)}
    assert sorted(upward - KNOWN) == [], "imports pointing up a layer (see docs/design.md, Layers)"


def test_known_violations_still_exist():
    # a fixed violation must leave KNOWN, so the list only shrinks
    graph = edges()
    assert sorted(KNOWN - {edge for edge in graph if is_upward(*edge, graph)}) == []


def test_the_check_sees_local_imports():
    # strategies/sigframe.py imports strategies.cfi inside a function: the check must see it
    assert ("plugin.strategies.sigframe", "plugin.strategies.cfi") in edges()
    assert is_upward("plugin.model.rules", "plugin.formats.dwarf_expr")
    assert ("plugin.model.rules", "plugin.formats.dwarf_expr") not in edges()    # installed from above instead
    assert not is_upward("plugin.engine", "plugin.strategies.cfi")
