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


def _imported_modules(path: Path) -> set[str]:
    """Every ``hdeval`` module ``path`` imports anywhere (lazy imports in functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "hdeval")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "hdeval":
                continue
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import mod`
    return found


def code_closure(script: Path) -> set[str]:
    """Repository-relative paths of the hdeval files ``script`` needs (packages' __init__ too)."""
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
    return {str(p.relative_to(REPO)) for p in seen}


def code_units(files: set[str]) -> set[str]:
    """What a stage declares for ``files``: each file's subpackage (``hdeval/llm``), or the file
    itself where it is a top-level module (``hdeval/errors.py``)."""
    return {f if f.count("/") == 1 else "/".join(f.split("/")[:2]) for f in files}
