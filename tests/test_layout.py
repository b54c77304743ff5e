"""The library's layout stays readable: few top-level modules, none long, no import cycles
between modules, no two subpackages importing each other, and the judge's backends apart."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from tests.code_deps import REPO

PACKAGE = REPO / "hdeval"


def _modules() -> dict[str, Path]:
    """Dotted name of every hdeval module -> its file."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The hdeval modules ``path`` imports anywhere (lazy and type-checking imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out |= {n for n in names if n in modules}
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _folder(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_few_top_level_modules_and_none_long() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= 12, sorted(top)
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 300}  # fmt: skip
    assert not long, long


def test_no_module_imports_itself_through_others() -> None:
    graph = _graph()
    # a package's __init__ re-exporting its modules is not a cycle of behaviour
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {exc.args[1]}") from None


def test_no_two_folders_import_each_other() -> None:
    edges = {
        (_folder(m), _folder(d))
        for m, deps in _graph().items()
        for d in deps
        if _folder(m) != _folder(d)
    }
    mutual = sorted((a, b) for a, b in edges if (b, a) in edges and a < b)
    assert not mutual, mutual


#: The backends of :mod:`hdeval.llm`, one subpackage each.
BACKENDS = ("hdeval.llm.local", "hdeval.llm.server")


def _backend(module: str) -> str | None:
    return next((b for b in BACKENDS if module == b or module.startswith(b + ".")), None)


def test_the_judge_backends_import_neither_each_other_nor_the_judge() -> None:
    """Each backend of hdeval.llm needs only the shared modules beside the judge: never another
    backend, nor the judge or the factory built over them."""
    above = {"hdeval.llm.judge", "hdeval.llm.factory"}
    crossing = sorted(
        (m, d)
        for m, deps in _graph().items()
        if (side := _backend(m)) is not None
        for d in deps
        if d in above or _backend(d) not in (None, side)
    )
    assert not crossing, crossing
