"""The ``hdeval`` command: its sub-command groups, shared options, logging and error exit."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from hdeval.errors import HDEvalError

app = typer.Typer(help="Trainable, explainable LLM evaluation (HD-Eval).", no_args_is_help=True)
model_app = typer.Typer(help="The embedded default judge model.", no_args_is_help=True)
cache_app = typer.Typer(help="The persistent LLM result cache.", no_args_is_help=True)
data_app = typer.Typer(help="Label files: convert public rating sets.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(cache_app, name="cache")
app.add_typer(data_app, name="data")
console = Console(stderr=True)

ParamsOption = Annotated[
    Path | None,
    typer.Option(
        "--params",
        help="Params YAML (its 'llm' section picks the judge); default ./params.yaml if present.",
    ),
]


def _params_file(path: Path | None) -> Path | None:
    """The params file in use: the one named, else ./params.yaml if present, else None."""
    if path is not None:
        return path
    return Path("params.yaml") if Path("params.yaml").is_file() else None


def _params(path: Path | None):
    """The params file named (which must exist), else ./params.yaml if present, else defaults."""
    from hdeval.params import Params, load_params

    found = _params_file(path)
    return load_params(found) if found is not None else Params()


MaxCharsOption = Annotated[
    int | None,
    typer.Option(
        "--max-field-chars",
        min=1,
        help="Longest text field of a row in characters (default: data.max_field_chars).",
    ),
]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )


def run_cli() -> None:
    """Entry point that turns hdeval's own errors into one clear line and exit code 2.

    Click's standalone mode keeps usage errors (exit 2) and ``typer.Exit`` codes intact.
    """
    try:
        app()
    except HDEvalError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
