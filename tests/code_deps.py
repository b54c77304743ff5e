"""The hdeval source files a script imports, directly or through other hdeval modules."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _module_file(module: str) -> Path | None:
    base = REPO / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for types only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _imported_modules(path: Path) -> set[str]:
    """Every ``hdeval`` module ``path`` imports when it runs (lazy imports in functions
    included, imports for type checking only left out)."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "hdeval")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "hdeval":
                continue
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import mod`
    return found


def code_closure(script: Path) -> set[str]:
    """Repository-relative paths of the hdeval files ``script`` needs (packages' __init__ too,
    ``script`` itself where it is one)."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        for module in _imported_modules(path):
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                target = _module_file(".".join(parts[:depth]))
                if target is not None and target not in seen:
                    seen.add(target)
                    todo.append(target)
    if script.is_relative_to(REPO / "hdeval"):
        seen.add(script)
    return {str(p.relative_to(REPO)) for p in seen}


def code_units(files: set[str]) -> set[str]:
    """What a stage declares for ``files``: each file's subpackage (``hdeval/llm``), or the file
    itself where it is a top-level module (``hdeval/errors.py``) or one of the pipeline's own
    (``hdeval/pipeline/stages/layer.py``: a stage does not re-run when another one changes)."""
    return {
        f if f.count("/") == 1 or f.startswith("hdeval/pipeline/") else "/".join(f.split("/")[:2])
        for f in files
    }
